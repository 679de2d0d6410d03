// Command reltable turns the `go test -json` output of the malformed-archive
// and hostile-decompression suites (test/e2e: TestMalformed,
// TestMalformedAgent, TestHostileDecompression) into the markdown tables of
// docs/reliability.md. It reads the JSON on stdin and prints the tables, or,
// with -doc, rewrites them in place between their markers:
//
//	go test -json -count=1 -run 'TestMalformed$|TestMalformedAgent$|TestHostileDecompression$' ./test/e2e > /tmp/rel.json
//	go run ./test/reltable -doc docs/reliability.md < /tmp/rel.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json`.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// run is what the suite said about one subtest.
type run struct {
	result   string // pass, fail, skip
	outcome  string // the text after "outcome: "
	elapsed  float64
	order    int    // first seen: the suite's order
	firstErr string // the first other line the test logged (why it failed)
}

func main() {
	doc := flag.String("doc", "", "rewrite the tables between their markers in this markdown file instead of printing them")
	flag.Parse()
	if err := realMain(os.Stdin, os.Stdout, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "reltable:", err)
		os.Exit(1)
	}
}

func realMain(in io.Reader, out io.Writer, doc string) error {
	runs := map[string]*run{}
	get := func(name string) *run {
		r, ok := runs[name]
		if !ok {
			r = &run{order: len(runs)}
			runs[name] = r
		}
		return r
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
			continue
		}
		r := get(e.Test)
		switch e.Action {
		case "pass", "fail", "skip":
			r.result, r.elapsed = e.Action, e.Elapsed
		case "output":
			if _, after, ok := strings.Cut(e.Output, "outcome: "); ok {
				r.outcome = strings.TrimSpace(after)
			} else if m := testLine.FindStringSubmatch(e.Output); m != nil && r.firstErr == "" {
				r.firstErr = strings.TrimSpace(m[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the test output: %w", err)
	}
	tables := map[string]string{
		"malformed": malformedTable(runs),
		"hostile":   hostileTable(runs),
	}
	if doc == "" {
		for _, k := range []string{"malformed", "hostile"} {
			fmt.Fprintln(out, tables[k])
		}
		return nil
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	text := string(b)
	for k, table := range tables {
		begin, end := "<!-- "+k+":begin -->\n", "<!-- "+k+":end -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i {
			return fmt.Errorf("%s: no %q … %q markers", doc, strings.TrimSpace(begin), end)
		}
		text = text[:i+len(begin)] + table + text[j:]
	}
	return os.WriteFile(doc, []byte(text), 0o644)
}

var (
	daemons   = []string{"embedded", "debian-1.6"}
	paths     = []string{"stream", "direct"} // the write paths TestMalformed runs on
	hexDigest = regexp.MustCompile(`sha256[:/][0-9a-f]{64}`)
	tmpPath   = regexp.MustCompile(`/tmp/\S*/`)
	testLine  = regexp.MustCompile(`^\s+\w+_test\.go:\d+: (.*)`)
	field     = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)
)

// fields parses `key=value key="quoted value"` pairs.
func fields(s string) map[string]string {
	m := map[string]string{}
	for _, f := range field.FindAllStringSubmatch(s, -1) {
		v := f[2]
		if strings.HasPrefix(v, `"`) {
			var u string
			if json.Unmarshal([]byte(v), &u) == nil {
				v = u
			}
		}
		m[f[1]] = v
	}
	return m
}

// tidy makes an error message fit a table cell: digests shortened, temp
// paths dropped, pipes escaped.
func tidy(s string) string {
	s = hexDigest.ReplaceAllStringFunc(s, func(d string) string { return d[:len("sha256:")+8] + "…" })
	s = tmpPath.ReplaceAllString(s, "")
	if len(s) > 320 {
		s = s[:320] + "…"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

func malformedTable(runs map[string]*run) string {
	first := map[string]int{}
	for name, r := range runs {
		parts := strings.Split(name, "/")
		if len(parts) == 4 && parts[0] == "TestMalformed" {
			if o, ok := first[parts[3]]; !ok || r.order < o {
				first[parts[3]] = r.order
			}
		}
	}
	var names []string
	for k := range first {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return first[names[i]] < first[names[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "| kind | containerd 2.4.2 (embedded), stream | 2.4.2, direct | containerd 1.6 (Debian), stream | 1.6, direct | outcome | holdfast's message |\n|---|---|---|---|---|---|---|\n")
	// A cell: the result, and the sync's peak RSS and time when logged.
	cell := func(r *run) string {
		f := fields(r.outcome)
		if f["peak_rss"] == "" {
			return r.result
		}
		return fmt.Sprintf("%s, %s MiB, %s", r.result, f["peak_rss"], f["took"])
	}
	count := map[string]int{}
	for _, k := range names {
		var cells []string
		var msg, outcome string
		other := map[string]string{} // a write path's message, where it differs
		var failed []string          // why a run failed, where one did
		for _, d := range daemons {
			for _, p := range paths {
				r, ok := runs["TestMalformed/"+d+"/"+p+"/"+k]
				switch {
				case !ok || r.result == "":
					cells = append(cells, "not run")
					continue
				case r.result == "pass":
					count[d+"/"+p]++
				}
				cells = append(cells, cell(r))
				m := fields(r.outcome)["message"]
				if r.result == "fail" {
					failed = append(failed, "test failed on "+d+"/"+p+": "+r.firstErr)
				}
				if msg == "" {
					msg = m
					outcome = "—"
					if fs := strings.Fields(r.outcome); len(fs) > 0 {
						outcome = fs[0]
					}
					if outcome == "skipped" && r.result != "fail" {
						msg = "skipped (debug log: not an archive)"
					}
				} else if m != "" && m != msg && outcome != "skipped" && other[p] == "" {
					other[p] = m
				}
			}
		}
		for _, f := range failed {
			msg += " — " + f
		}
		for _, p := range paths {
			if other[p] != "" {
				msg += " — on " + p + ": " + other[p]
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k, strings.Join(cells, " | "), outcome+" | "+tidy(msg))
	}
	fmt.Fprintf(&b, "\nA cell: the test's result, the peak RSS of the `holdfast sync` process and how long it ran (with the two good\narchives already imported by the first pass).\n\n%d kinds; passed:", len(names))
	for i, d := range daemons {
		for j, p := range paths {
			sep := ","
			if i == 0 && j == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %d on %s/%s", sep, count[d+"/"+p], d, p)
		}
	}
	b.WriteString(".")
	for _, d := range daemons {
		for _, p := range paths {
			if r, ok := runs["TestMalformed/"+d+"/"+p]; ok && r.result != "" {
				fmt.Fprintf(&b, " One pass per kind on %s/%s: %.1f s in all.", d, p, r.elapsed)
			}
		}
	}
	for _, d := range daemons {
		for _, p := range paths {
			if r, ok := runs["TestMalformedAgent/"+d+"/"+p]; ok && r.result != "" {
				fmt.Fprintf(&b, " Every kind dropped at once under `holdfast run` (%s/%s): %s.", d, p, r.result)
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

func hostileTable(runs map[string]*run) string {
	var names []string
	for name := range runs {
		parts := strings.Split(name, "/")
		if len(parts) == 2 && parts[0] == "TestHostileDecompression" {
			names = append(names, parts[1])
		}
	}
	sort.Slice(names, func(i, j int) bool {
		return runs["TestHostileDecompression/"+names[i]].order < runs["TestHostileDecompression/"+names[j]].order
	})
	var b strings.Builder
	fmt.Fprintf(&b, "| case | file | result | exit | peak RSS | sync took | holdfast's message |\n|---|---|---|---|---|---|---|\n")
	for _, n := range names {
		r := runs["TestHostileDecompression/"+n]
		f := fields(r.outcome)
		msg := f["message"]
		if msg == "" {
			msg = "(imported)"
		}
		if _, after, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "error: import ") {
			msg = after
		}
		fmt.Fprintf(&b, "| `%s` | %s KiB | %s | %s | %s MiB | %s | %s |\n", n, f["file"], r.result, f["exit"], f["peak_rss"], f["took"], tidy(msg))
	}
	return b.String()
}
