package files

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// SHA256 is the hex SHA-256 of the regular file at path (Open's), read to
// its end; an error names the path.
func SHA256(path string) (string, error) {
	f, err := Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
