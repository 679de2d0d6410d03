package main

import (
	"fmt"
	"regexp"
	"strings"
)

// fileVersion is the version the release's files are named with: VERSION
// without a leading v. It must be a plain file-name part.
func fileVersion(version string) (string, error) {
	v := strings.TrimPrefix(version, "v")
	if v == "" || v == "." || v == ".." || !fileSafe.MatchString(v) {
		return "", fmt.Errorf("version %q: want letters, digits and . _ + - only", version)
	}
	return v, nil
}

var fileSafe = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)

// semVer is SemVer 2.0.0, as helm wants a chart's version.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*)?` +
	`(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// chartVersion is the chart's version and appVersion for the file version
// v: v itself when it is SemVer; else (a commit, git describe's
// 00ea51a-dirty) 0.0.0-dev.<v>, each dot-separated part of v a valid
// pre-release part (a part of digits only with a leading zero gets a g,
// as git describe writes a commit).
func chartVersion(v string) string {
	if semVer.MatchString(v) {
		return v
	}
	parts := strings.FieldsFunc(strings.ReplaceAll(v, "+", "."), func(r rune) bool { return r == '.' || r == '_' })
	for i, p := range parts {
		if len(p) > 1 && p[0] == '0' && strings.Trim(p, "0123456789") == "" {
			parts[i] = "g" + p
		}
	}
	return "0.0.0-dev." + strings.Join(parts, ".")
}
