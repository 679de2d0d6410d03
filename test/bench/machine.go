package bench

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is what the numbers were measured on.
type Machine struct {
	CPUs              int    `json:"cpus"`
	CPUModel          string `json:"cpu_model"`
	MemoryBytes       int64  `json:"memory_bytes"`
	Kernel            string `json:"kernel"`
	OS                string `json:"os"`
	WorkDir           string `json:"work_dir"`
	Filesystem        string `json:"filesystem"` // of the work dir: type and source
	GoVersion         string `json:"go_version"` // the harness's
	HoldfastGoVersion string `json:"holdfast_go_version"`
	HoldfastVersion   string `json:"holdfast_version"`
	ContainerdVersion string `json:"containerd_version"` // as the server reports it
	CtrVersion        string `json:"ctr_version"`
	LoadAvgStart      string `json:"loadavg_start"`
	LoadAvgEnd        string `json:"loadavg_end,omitempty"`
}

// describeMachine collects the facts that need no containerd.
func describeMachine(ctx context.Context, workDir string, tools Tools) Machine {
	m := Machine{
		CPUs:         runtime.NumCPU(),
		CPUModel:     cpuModel(),
		MemoryBytes:  memTotal(),
		OS:           osRelease(),
		WorkDir:      workDir,
		Filesystem:   filesystemOf(workDir),
		GoVersion:    runtime.Version(),
		LoadAvgStart: loadAvg(),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if bi, err := buildinfo.ReadFile(tools.Holdfast); err == nil {
		m.HoldfastGoVersion = bi.GoVersion
	}
	m.HoldfastVersion = firstLine(exec.CommandContext(ctx, tools.Holdfast, "version").Output())
	m.CtrVersion = firstLine(exec.CommandContext(ctx, tools.Ctr, "--version").Output())
	return m
}

func firstLine(b []byte, err error) string {
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotal() int64 { return procKiB("/proc/meminfo", "MemTotal:") }

// procKiB reads a "Key:  N kB" line of a /proc file, in bytes; 0 if absent.
func procKiB(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func osRelease() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// filesystemOf is "<type> on <source> (<mount point>)" of the mount holding
// path, from /proc/self/mountinfo: the longest mount point that is a prefix.
func filesystemOf(path string) string {
	path, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	best, desc := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		mp := unescapeMount(f[4])
		if !within(path, mp) || len(mp) < len(best) {
			continue
		}
		best, desc = mp, fmt.Sprintf("%s on %s (%s)", g[0], g[1], mp)
	}
	return desc
}

func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
