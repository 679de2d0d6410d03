package runtime

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
)

// CRIHonoursPins reports whether a containerd of this version makes its CRI
// report io.cri-containerd.pinned to the kubelet: from 1.7.10 on the 1.7 line,
// from 1.6.25 on the 1.6 line, and every 2.x. An unparsable version is given
// the benefit of the doubt.
func CRIHonoursPins(version string) bool {
	major, minor, patch, ok := parseVersion(version)
	if !ok {
		return true
	}
	switch {
	case major >= 2:
		return true
	case major < 1:
		return false
	case minor > 7:
		return true
	case minor == 7:
		return patch >= 10
	case minor == 6:
		return patch >= 25
	default:
		return false
	}
}

// ExpiresRecords reports whether a containerd of this version collects an
// image record once its LabelExpire has passed, unless a lease holds it:
// every 2.x. On 1.x every record is a root of the GC, and a lease takes no
// records. An unparsable version is taken for a new one.
func ExpiresRecords(version string) bool {
	major, _, _, ok := parseVersion(version)
	return !ok || major >= 2
}

// parseVersion reads "v1.6.20", "1.6.20~ds1", "2.4.2+unknown" and the like.
func parseVersion(v string) (major, minor, patch int, ok bool) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	end := strings.IndexFunc(v, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if end >= 0 {
		v = v[:end]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return 0, 0, 0, false
	}
	nums := make([]int, 3)
	for i := 0; i < len(parts) && i < 3; i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return 0, 0, 0, false
		}
		nums[i] = n
	}
	return nums[0], nums[1], nums[2], true
}

// CheckServer logs the server's version and warns when its CRI will not report
// pins to the kubelet.
func CheckServer(ctx context.Context, rt Runtime, log *slog.Logger) (ServerInfo, error) {
	info, err := rt.Server(ctx)
	if err != nil {
		return info, err
	}
	log.Debug("containerd", "version", info.Version)
	if !CRIHonoursPins(info.Version) {
		log.Warn("this containerd's CRI does not report pinned images to the kubelet (needs containerd >= 1.7.10 or 1.6.25): the kubelet's image GC may delete images holdfast pinned; holdfast's leases still keep their content and its heal restores deleted images",
			"version", info.Version)
	}
	return info, nil
}
