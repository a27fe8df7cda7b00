package main

// The README's program runs as it is: b delivers a's two messages in
// a's order.
func Example() {
	main()
	// Output:
	// seq 1: hello
	// seq 2: multicast
}
