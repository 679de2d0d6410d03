// Command holdfast-bench measures holdfast's imports side by side with ctr
// and with the machine's floor (see package bench). `make bench` runs it.
//
//	holdfast-bench -holdfast bin/holdfast -ctr bin/ctr
//	holdfast-bench -quick
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/holdfast-project/holdfast/test/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("holdfast-bench", flag.ContinueOnError)
	var (
		holdfast   = fs.String("holdfast", "", "holdfast `binary` (empty: build one into the work dir)")
		ctr        = fs.String("ctr", "", "ctr `binary` of the same containerd version (empty: build one into the work dir)")
		set        = fs.String("set", "full", "archive `set`: full (1 × 1 GiB, 4 × 256 MiB, 20 × 100 MiB, 300 small layers, 4 GiB for P5) or quick (tiny)")
		quick      = fs.Bool("quick", false, "tiny archives, one round: a smoke test of the harness (same as -set quick -rounds 1)")
		rounds     = fs.Int("rounds", 3, "rounds of alternating measurements")
		heal       = fs.Int("heal", 0, "P4 heal samples (images deleted once each; 0: the set's, 50 for full)")
		watch      = fs.Int("watch", 0, "P4 watch samples (archives renamed in; 0: the set's, 5 for full)")
		zstdWindow = fs.Int("zstd-window", 8<<20, "zstd window `BYTES` of the .tar.zst (a power of two)")
		work       = fs.String("work", "", "`DIR` to make the work dir in, on the filesystem to measure (empty: $TMPDIR or /tmp)")
		keep       = fs.Bool("keep", false, "keep the work dir (archives, logs)")
		dropCaches = fs.Bool("drop-caches", false, "drop the page cache before each measurement (root; affects the whole machine)")
		only       = fs.String("only", "", "comma-separated scenario `groups` to run: "+strings.Join(bench.Groups(), ","))
		out        = fs.String("out", filepath.Join("test", "bench", "results", "latest.json"), "results JSON `file`")
		cd16       = fs.String("containerd16", bench.DefaultContainerd16, "Debian's containerd 1.6 `binary`, P1's second target (missing: those rows are skipped)")
		profile    = fs.String("profile", "", "`DIR` for containerd's CPU profile of one more (uncounted) holdfast sync of the large archive")
		p11Nodes   = fs.String("p11-nodes", "", "P11's node `counts`, comma-separated (empty: 2,4,8; quick: 2)")
		p11Rate    = fs.Int("p11-rate", 0, "P11's link rate in `Mbit/s`, each way (0: 200)")
		p11Image   = fs.Int64("p11-image-mib", 0, "P11's image size in `MiB` (0: 200; quick: 4)")
		p11Layers  = fs.Int("p11-layers", 0, "P11's image `layers` (0: 4; quick: 2)")
		p11Report  = fs.Duration("p11-report-interval", 0, "P11's reporters' --interval (0: 10s, the chart's)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "holdfast-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg := bench.Config{
		Tools:        bench.Tools{Holdfast: *holdfast, Ctr: *ctr},
		Rounds:       *rounds,
		ZstdWindow:   *zstdWindow,
		WorkDir:      *work,
		Keep:         *keep,
		DropCaches:   *dropCaches,
		ProfileDir:   *profile,
		Containerd16: *cd16,
		Command:      "holdfast-bench " + strings.Join(args, " "),
		Progress:     os.Stderr,
	}
	switch {
	case *quick:
		cfg.Set, cfg.Rounds = bench.QuickSet(), 1
	case *set == "full":
		cfg.Set = bench.FullSet()
	case *set == "quick":
		cfg.Set = bench.QuickSet()
	default:
		fmt.Fprintf(os.Stderr, "holdfast-bench: unknown set %q (want full or quick)\n", *set)
		return 2
	}
	if *heal > 0 {
		cfg.Set.Heal.Count = *heal
	}
	if *watch > 0 {
		cfg.Set.Watch.Count = *watch
	}
	cfg.P11 = bench.P11Config{RateMbit: *p11Rate, ImageBytes: *p11Image << 20, Layers: *p11Layers, ReportInterval: *p11Report}
	if *p11Nodes != "" {
		for _, f := range strings.Split(*p11Nodes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				fmt.Fprintf(os.Stderr, "holdfast-bench: -p11-nodes: %v\n", err)
				return 2
			}
			cfg.P11.Nodes = append(cfg.P11.Nodes, n)
		}
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	if cfg.Tools.Holdfast == "" || cfg.Tools.Ctr == "" {
		dir, err := os.MkdirTemp(*work, "hfb-bin-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(os.Stderr, "building holdfast and ctr into %s\n", dir)
		built, err := bench.BuildTools(ctx, dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", err)
			return 1
		}
		if cfg.Tools.Holdfast == "" {
			cfg.Tools.Holdfast = built.Holdfast
		}
		if cfg.Tools.Ctr == "" {
			cfg.Tools.Ctr = built.Ctr
		}
	}
	for _, p := range []*string{&cfg.Tools.Holdfast, &cfg.Tools.Ctr} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", err)
			return 2
		}
		*p = abs
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", err)
		return 2
	}

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", err)
		if ctx.Err() != nil || res == nil {
			return 1
		}
		// Report what was measured before the error.
	}
	if werr := bench.WriteReport(os.Stdout, res); werr != nil {
		fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", werr)
		return 1
	}
	if werr := bench.WriteP9Report(os.Stdout, res); werr != nil {
		fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", werr)
		return 1
	}
	if werr := bench.WriteP11Report(os.Stdout, res); werr != nil {
		fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", werr)
		return 1
	}
	if werr := bench.WriteJSON(*out, res); werr != nil {
		fmt.Fprintf(os.Stderr, "holdfast-bench: %v\n", werr)
		return 1
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%s in all)\n", *out, res.Elapsed().Round(1e9))
	if err != nil || res.Failed() > 0 {
		return 1
	}
	return 0
}
