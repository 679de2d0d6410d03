package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// SeedsVar, set to 1, makes Seeds write the seeds it is given into the
// package's testdata/fuzz/<FuzzTarget>/ as well (go test -run FuzzX with it
// set regenerates the committed corpus).
const SeedsVar = "HOLDFAST_WRITE_SEEDS"

// Seeds adds each seed (the arguments of one f.Add call) to f's corpus. With
// SeedsVar=1 it also writes them as corpus files named seed-<name>, so that
// plain `go test` and `go test -fuzz` start from them even without f.Add.
// Arguments may be []byte, string, bool, int, int64, uint8, uint64.
func Seeds(f *testing.F, seeds map[string][]any) {
	f.Helper()
	write := os.Getenv(SeedsVar) == "1"
	dir := filepath.Join("testdata", "fuzz", f.Name())
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for name, args := range seeds {
		f.Add(args...)
		if !write {
			continue
		}
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
			case string:
				fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
			case bool:
				fmt.Fprintf(&b, "bool(%t)\n", v)
			case int:
				fmt.Fprintf(&b, "int(%d)\n", v)
			case int64:
				fmt.Fprintf(&b, "int64(%d)\n", v)
			case uint8:
				fmt.Fprintf(&b, "byte(%d)\n", v)
			case uint64:
				fmt.Fprintf(&b, "uint64(%d)\n", v)
			default:
				f.Fatalf("seed %s: argument of type %T", name, a)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(b.String()), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}
