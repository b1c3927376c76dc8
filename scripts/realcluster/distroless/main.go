// A distroless-like service for the real-cluster tier (docs/debug.md): one static binary and
// nothing else in its image, no shell. It says it is up, answers each line of its stdin (when
// its container has stdin: attach reaches it), and runs until it is killed.
package main

import (
	"bufio"
	"fmt"
	"os"
	"time"
)

func main() {
	fmt.Println("kx-distroless up")
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		fmt.Printf("kx-distroless got: %s\n", lines.Text())
	}
	for {
		time.Sleep(time.Hour)
	}
}
