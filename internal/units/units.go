// Package units formats byte counts for people, one way everywhere.
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
