// Command hello is a small binary of holdfast's module for tools/sbom's tests:
// it links one module beside the standard library.
package main

import (
	"fmt"
	"os"

	"github.com/opencontainers/go-digest"
)

func main() {
	fmt.Println(digest.FromString(os.Args[0]))
}
