// Command mutants checks that holdfast's tests notice when its safety promises
// break. It copies the source tree to a temporary directory, runs the tests
// named in the list once unchanged (they must pass), then applies one
// sabotage at a time — exact text replacements, each of which must match
// exactly once — and runs that sabotage's tests. A sabotage the tests fail
// on is KILLED; one they pass is SURVIVED; one whose text is no longer in
// the code is STALE; one that does not build is BROKEN. Anything but KILLED
// makes the exit status 1. `make mutants` runs it with the environment
// `make test` uses; it is not part of `make test`.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// edit replaces old with new in file; old must occur exactly once.
type edit struct {
	file, old, new string
}

// tests are test functions of one package, run with -run '^(A|B)$' and env
// (KEY=value) added to the environment.
type tests struct {
	pkg   string
	names []string
	env   []string
}

func (ts tests) pattern() string { return "^(" + strings.Join(ts.names, "|") + ")$" }

func (ts tests) String() string {
	return strings.TrimSpace(strings.Join(ts.env, " ") + " " + ts.pkg + " " + strings.Join(ts.names, ","))
}

// sabotage breaks one promise; tests are what must notice.
type sabotage struct {
	name  string
	edits []edit
	tests []tests
}

// outcome is what became of one sabotage.
type outcome struct {
	result string // KILLED, SURVIVED, STALE, BROKEN
	detail string // the failing tests, or why stale or broken
}

func main() {
	only := flag.String("run", "", "only the sabotages whose name matches this regular expression")
	timeout := flag.Duration("timeout", 15*time.Minute, "timeout of each go test")
	keep := flag.Bool("keep", false, "keep the work dir (its path is printed)")
	verbose := flag.Bool("v", false, "print the tests' output")
	check := flag.Bool("check", false, "only check that every sabotage's text occurs exactly once; run no test")
	flag.Parse()
	if *check {
		if err := checkTexts(); err != nil {
			fmt.Fprintln(os.Stderr, "mutants:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*only, *timeout, *keep, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(only string, timeout time.Duration, keep, verbose bool) error {
	list := sabotages
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		list = nil
		for _, s := range sabotages {
			if re.MatchString(s.name) {
				list = append(list, s)
			}
		}
		if len(list) == 0 {
			return fmt.Errorf("no sabotage matches %q", only)
		}
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "holdfast-mutants-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "mutants: work dir", work)
	} else {
		defer os.RemoveAll(work)
	}
	if err := copyTree(root, work); err != nil {
		return err
	}
	r := runner{dir: work, timeout: timeout, verbose: verbose}

	// The tests must pass before anything is broken, or every sabotage
	// would look killed.
	start := time.Now()
	for _, ts := range merged(list) {
		fmt.Fprintf(os.Stderr, "mutants: baseline %s\n", ts)
		if failed, out, err := r.goTest(ts); err != nil || failed != "" {
			return fmt.Errorf("the tests fail without any sabotage (%s): %v %s\n%s", ts, err, failed, tail(out, 40))
		}
	}

	outcomes := make([]outcome, len(list))
	for i, s := range list {
		fmt.Fprintf(os.Stderr, "mutants: [%d/%d] %s\n", i+1, len(list), s.name)
		outcomes[i] = r.try(s)
		fmt.Fprintf(os.Stderr, "mutants:   %s %s\n", outcomes[i].result, outcomes[i].detail)
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SABOTAGE\tTESTS RUN\tRESULT\tDETAIL")
	counts := map[string]int{}
	for i, s := range list {
		var run []string
		for _, ts := range s.tests {
			run = append(run, ts.String())
		}
		o := outcomes[i]
		counts[o.result]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.name, strings.Join(run, "; "), o.result, o.detail)
	}
	tw.Flush()
	fmt.Printf("%d sabotages: %d killed, %d survived, %d stale, %d broken (%s)\n", len(list),
		counts["KILLED"], counts["SURVIVED"], counts["STALE"], counts["BROKEN"], time.Since(start).Round(time.Second))
	if counts["KILLED"] != len(list) {
		return fmt.Errorf("%d of %d sabotages not killed", len(list)-counts["KILLED"], len(list))
	}
	return nil
}

// checkTexts reports the sabotages whose text no longer occurs exactly once
// in the tree as it is (edits of one sabotage apply in order).
func checkTexts() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	stale := 0
	for _, s := range sabotages {
		files := map[string][]byte{}
		for _, e := range s.edits {
			b, ok := files[e.file]
			if !ok {
				if b, err = os.ReadFile(filepath.Join(root, e.file)); err != nil {
					return err
				}
			}
			if n := bytes.Count(b, []byte(e.old)); n != 1 {
				fmt.Printf("STALE %s: %s: the text to replace occurs %d times: %q\n", s.name, e.file, n, firstLine(e.old))
				stale++
				break
			}
			files[e.file] = bytes.Replace(b, []byte(e.old), []byte(e.new), 1)
		}
	}
	if stale > 0 {
		return fmt.Errorf("%d of %d sabotages stale", stale, len(sabotages))
	}
	fmt.Printf("%d sabotages, every text found once\n", len(sabotages))
	return nil
}

type runner struct {
	dir     string
	timeout time.Duration
	verbose bool
}

// try applies s, runs its tests until one fails, and restores the files.
func (r runner) try(s sabotage) outcome {
	originals := map[string][]byte{}
	defer func() {
		for f, b := range originals {
			if err := os.WriteFile(filepath.Join(r.dir, f), b, 0o644); err != nil {
				panic(fmt.Sprintf("restoring %s: %v", f, err)) // every later result would be wrong
			}
		}
	}()
	for _, e := range s.edits {
		path := filepath.Join(r.dir, e.file)
		cur, err := os.ReadFile(path)
		if err != nil {
			return outcome{"STALE", err.Error()}
		}
		if _, ok := originals[e.file]; !ok {
			originals[e.file] = cur
		}
		if n := bytes.Count(cur, []byte(e.old)); n != 1 {
			return outcome{"STALE", fmt.Sprintf("%s: the text to replace occurs %d times: %q", e.file, n, firstLine(e.old))}
		}
		if err := os.WriteFile(path, bytes.Replace(cur, []byte(e.old), []byte(e.new), 1), 0o644); err != nil {
			return outcome{"STALE", err.Error()}
		}
	}
	for _, ts := range s.tests {
		failed, out, err := r.goTest(ts)
		switch {
		case err != nil:
			return outcome{"BROKEN", err.Error() + ": " + tail(out, 5)}
		case failed != "":
			return outcome{"KILLED", "by " + failed}
		}
	}
	return outcome{"SURVIVED", "every test passed"}
}

// buildFailed marks go test output of a package that did not build or vet.
var buildFailed = regexp.MustCompile(`\[(build|setup) failed\]`)

// goTest runs ts in the work dir. It returns the failed tests' names (empty
// when all passed), the output, and an error when the package did not build.
func (r runner) goTest(ts tests) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-v", "-count=1", "-timeout", r.timeout.String(), "-run", ts.pattern(), ts.pkg)
	cmd.Dir = r.dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-buildvcs=false"), ts.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if r.verbose {
		cmd.Stdout = io.MultiWriter(&out, os.Stderr)
		cmd.Stderr = cmd.Stdout
	}
	err := cmd.Run()
	text := out.String()
	if err == nil {
		// Each test must have run and passed: a test that is missing or
		// skipped judges nothing.
		for _, n := range ts.names {
			if !strings.Contains(text, "--- PASS: "+n+" ") {
				return "", text, fmt.Errorf("%s did not run and pass (missing or skipped)", n)
			}
		}
		return "", text, nil
	}
	if buildFailed.MatchString(text) {
		return "", text, fmt.Errorf("%s does not build", ts.pkg)
	}
	var failed []string
	for _, m := range regexp.MustCompile(`(?m)^--- FAIL: (\S+)`).FindAllStringSubmatch(text, -1) {
		failed = append(failed, m[1])
	}
	if len(failed) == 0 {
		if m := regexp.MustCompile(`(?m)^panic: .*`).FindString(text); m != "" {
			return m, text, nil // a test panicked: that is noticing too
		}
		// No test failed: TestMain could not build the binaries, or the
		// like. That judges nothing.
		return "", text, fmt.Errorf("%s failed without a failing test", ts.pkg)
	}
	return strings.Join(failed, ", "), text, nil
}

// merged is every test of the list, once, by package and environment.
func merged(list []sabotage) []tests {
	groups := map[string]*tests{}
	seen := map[string]bool{}
	for _, s := range list {
		for _, ts := range s.tests {
			key := ts.pkg + "\x00" + strings.Join(ts.env, "\x00")
			g := groups[key]
			if g == nil {
				g = &tests{pkg: ts.pkg, env: ts.env}
				groups[key] = g
			}
			for _, n := range ts.names {
				if !seen[key+"\x00"+n] {
					seen[key+"\x00"+n] = true
					g.names = append(g.names, n)
				}
			}
		}
	}
	var out []tests
	for _, g := range groups {
		sort.Strings(g.names)
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root (run inside the git tree): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies the files git knows of, and new files it does not ignore
// (so bin/ and test binaries stay behind), from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the tree's files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		info, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, b, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
