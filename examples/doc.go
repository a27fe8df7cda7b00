// Package examples holds the programs the README and docs/ show, and the
// tests that keep those documents true: every Go code block of README.md
// and docs/*.md is a file here or the body of an Example function (compiled
// by go vet and go test, run where it has an Output comment), and the
// README's tshark output is what the dissector prints today.
//
// A Go code block is preceded by a marker naming its source:
//
//	<!-- code: examples/hello/main.go -->                      the whole file
//	<!-- code: examples/docs_example_test.go Example_xdp -->   a function's body
//
// The subdirectories are runnable programs: hello (the README's) and
// kvstore (a replicated key-value store).
package examples
