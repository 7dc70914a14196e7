package main

import "strings"

// connectionHint returns " (hint: ...)" for a connection error whose text points at a likely
// mistake in the flags or the configuration file, else "". plaintext is --plaintext.
//
// "http2: frame too large" (or another error reading the server preface) on a plaintext
// connection means the first bytes the server sent were not an HTTP/2 frame: gRPC read a TLS
// record header or "HTTP/1.1 400" as a frame length of megabytes (golang.org/x/net/http2,
// frame.go, ErrFrameTooLarge). "first record does not look like a TLS handshake" is the
// reverse: a TLS client talking to a plaintext server (crypto/tls, conn.go).
func connectionHint(msg string, plaintext bool) string {
	switch {
	case plaintext && (strings.Contains(msg, "frame too large") || strings.Contains(msg, "server preface")):
		return " (hint: the server on this port does not speak gRPC in plaintext: a TLS server (drop --plaintext), an HTTP/1 server, or the wrong port)"
	case !plaintext && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return " (hint: the server does not speak TLS: --plaintext if it should not)"
	}
	return ""
}
