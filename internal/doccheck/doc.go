// Package doccheck holds the test that compiles every Go block of README.md and docs/
// (docblocks_test.go); it has no code of its own.
package doccheck
