// Package units says numbers as a person reads them, one way everywhere:
// byte counts, and how many items a list leaves out.
package units

import "fmt"

// Bytes renders n in binary units with one decimal: "80.0 MiB"; below 1 KiB,
// "512 B".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// BytesExact is Bytes with the exact count, for messages a person checks by
// hand: "80.0 MiB (83886080 bytes)"; below 1 KiB, "512 bytes".
func BytesExact(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%s (%d bytes)", Bytes(n), n)
}

// Whole renders a limit, or a size a file declares against one, in whole
// units for messages: KiB below 1 MiB and MiB above, both rounded up, GiB
// when a whole number of them: "64 KiB", "128 MiB", "2 GiB".
func Whole(n uint64) string {
	mib := (n + 1<<20 - 1) >> 20
	if mib >= 1024 && mib%1024 == 0 {
		return fmt.Sprintf("%d GiB", mib>>10)
	}
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
	return fmt.Sprintf("%d MiB", mib)
}
