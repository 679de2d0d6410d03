// Command other is a binary of another module, with no version in its build
// info (as spegel in holdfast's image), for tools/sbom's tests.
package main

func main() {}
