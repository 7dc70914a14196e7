// Package rig holds what the command-line programs (cmd/spannerme-demo,
// cmd/spannerme-chaos) share to put a multi-endpoint Spanner client in front
// of ONE backend on loopback: the seeded backend (in-memory spannertest or the
// Cloud Spanner emulator), a wait for every pool to be READY, a log of switch
// events, and a writer that keeps concurrent lines whole.
//
// Everything here listens on and connects to 127.0.0.1 only. The types are
// safe for concurrent use.
package rig
