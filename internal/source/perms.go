package source

import "os"

// ScanOptions tune a scan.
type ScanOptions struct {
	// InsecurePerms reads dirs and lists that users other than root and
	// holdfast's own may write (--insecure-perms): see files.CheckPerms.
	InsecurePerms bool
	// What names the dirs in errors: "images dir" (the default) or "spool dir".
	What string
	// UID is the user holdfast runs as; 0 with UIDSet false means os.Geteuid().
	UID    int
	UIDSet bool
}

func (o ScanOptions) what() string {
	if o.What == "" {
		return "images dir"
	}
	return o.What
}

func (o ScanOptions) uid() int {
	if o.UIDSet {
		return o.UID
	}
	return os.Geteuid()
}
