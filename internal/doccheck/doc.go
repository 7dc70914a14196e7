// Package doccheck holds tests of the documentation against the code, and no code of its
// own: every Go block of README.md and docs/ compiles (docblocks_test.go), the README's
// install commands build a module before publication (install_test.go), and the supported
// Spanner client range agrees with the Makefile and go.mod (spannerrange_test.go).
package doccheck
