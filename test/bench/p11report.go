package bench

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/holdfast-project/holdfast/internal/imageset"
)

// P11's targets: staging by ImageSet within 1.5 × the bound, and no node
// sending more than 3 × the image.
const (
	p11BoundFactor  = 1.5
	p11ServedFactor = 3.0
	// p11ModelNodes is the cluster the model scales to, and the waves of
	// the ImageSet's default maxConcurrent there.
	p11ModelNodes = 1000
)

func ceilLog2(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// transferSeconds is the time size bytes take at rateMbit.
func transferSeconds(size int64, rateMbit int) float64 {
	return float64(size) * 8 / (float64(rateMbit) * 1e6)
}

// p11Bound is ⌈log2 n⌉ × (size ÷ rate): the waves from one holder, each
// moving the whole image over one link.
func p11Bound(n int, size int64, rateMbit int) float64 {
	return float64(ceilLog2(n)) * transferSeconds(size, rateMbit)
}

// p11Row is one node count and method: the median time, its ratio to the
// bound, and the median over the samples of the most bytes one node sent,
// as a multiple of the image.
type p11Row struct {
	N             int
	Method        string
	Samples       int
	Failed        int
	Median        float64
	Bound         float64
	Served        float64 // the median sample's most bytes any node sent ÷ the image's
	ServedByNode1 float64 // node 1's share, the same way
}

// p11Rows computes the rows of every node count and method in samples.
func p11Rows(samples []Sample, rateMbit int) []p11Row {
	type key struct {
		n int
		m string
	}
	var order []key
	by := map[key][]Sample{}
	for _, s := range samples {
		var n int
		if _, err := fmt.Sscanf(s.Scenario, "P11 N=%d", &n); err != nil {
			continue
		}
		k := key{n, s.Method}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], s)
	}
	slices.SortStableFunc(order, func(a, b key) int { return a.n - b.n })
	var rows []p11Row
	for _, k := range order {
		r := p11Row{N: k.n, Method: k.m, Median: math.NaN(), Served: math.NaN(), ServedByNode1: math.NaN()}
		var secs, served, first []float64
		for _, s := range by[k] {
			if s.Bytes > 0 {
				r.Bound = p11Bound(k.n, s.Bytes, rateMbit)
			}
			if s.Error != "" || s.Bytes <= 0 || len(s.Served) == 0 {
				r.Failed++
				continue
			}
			secs = append(secs, s.Seconds)
			served = append(served, float64(slices.Max(s.Served))/float64(s.Bytes))
			first = append(first, float64(s.Served[0])/float64(s.Bytes))
		}
		r.Samples = len(secs)
		if r.Samples > 0 {
			r.Median, r.Served, r.ServedByNode1 = Median(secs), Median(served), Median(first)
		}
		rows = append(rows, r)
	}
	return rows
}

// p11Model is the time to stage one image on p11ModelNodes nodes from the
// per-wave time measured with the ImageSet on the most nodes (its median
// over its waves, imageset.Waves), and from the
// bound's per-wave time (size ÷ rate), for maxConcurrent 64 (the default)
// and for maxConcurrent ≥ N/2.
type p11Model struct {
	FromN               int
	PerWave, BoundWave  float64
	Waves64, WavesHalf  int
	Measured64, Bound64 float64
	MeasuredHalf        float64
	BoundHalf           float64
}

func p11ModelOf(rows []p11Row, size int64, rateMbit int) (p11Model, bool) {
	m := p11Model{Waves64: imageset.Waves(p11ModelNodes, 64), WavesHalf: imageset.Waves(p11ModelNodes, p11ModelNodes/2),
		BoundWave: transferSeconds(size, rateMbit)}
	for _, r := range rows {
		if r.Method == MethodP11Waves && r.Samples > 0 && r.N > m.FromN {
			m.FromN, m.PerWave = r.N, r.Median/float64(imageset.Waves(r.N, r.N))
		}
	}
	if m.FromN == 0 {
		return m, false
	}
	m.Measured64, m.MeasuredHalf = float64(m.Waves64)*m.PerWave, float64(m.WavesHalf)*m.PerWave
	m.Bound64, m.BoundHalf = float64(m.Waves64)*m.BoundWave, float64(m.WavesHalf)*m.BoundWave
	return m, true
}

// WriteP11Report writes P11's table and the model, when P11 ran.
func WriteP11Report(w io.Writer, r *Results) error {
	var b strings.Builder
	writeP11(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeP11(b *strings.Builder, r *Results) {
	c := r.Config.P11
	rows := p11Rows(r.Samples, c.RateMbit)
	if len(rows) == 0 || c.RateMbit <= 0 {
		return
	}
	var size int64
	for _, s := range r.Samples {
		if strings.HasPrefix(s.Scenario, "P11 N=") && s.Bytes > 0 {
			size = s.Bytes
		}
	}
	fmt.Fprintf(b, "\nP11, staging one image (%s) on N simulated nodes, each link shaped to %d Mbit/s each way; "+
		"bound = ⌈log2 N⌉ × (size ÷ rate) = ⌈log2 N⌉ × %s; served = the most bytes one node's registry sent (TCP payload), ÷ the image.\n",
		formatBytes(size), c.RateMbit, formatSeconds(transferSeconds(size, c.RateMbit)))
	for _, s := range r.Samples {
		if s.Scenario == ScenarioP11Link && s.Error == "" && s.Seconds > 0 {
			fmt.Fprintf(b, "Link check: %s from node 1 to node 2 at %.0f Mbit/s.\n", formatBytes(s.Bytes), float64(s.Bytes)*8/s.Seconds/1e6)
		}
	}
	b.WriteString("\n")
	writeTable(b, []string{"N", "method", "median", "n", "bound", "÷ bound", "served", "node 1 sent", "target"}, p11TableRows(rows))
	if m, ok := p11ModelOf(rows, size, c.RateMbit); ok {
		fmt.Fprintf(b, "\nModel for %d nodes, from the ImageSet's time per wave at N=%d (%s; the bound's is %s): "+
			"maxConcurrent 64, %d waves: %s (bound %s); maxConcurrent ≥ N/2, %d waves: %s (bound %s).\n",
			p11ModelNodes, m.FromN, formatSeconds(m.PerWave), formatSeconds(m.BoundWave),
			m.Waves64, formatSeconds(m.Measured64), formatSeconds(m.Bound64),
			m.WavesHalf, formatSeconds(m.MeasuredHalf), formatSeconds(m.BoundHalf))
	}
}

// p11TableRows renders rows; the target column judges the ImageSet's rows
// (time ≤ 1.5 × bound, served ≤ 3 × the image).
func p11TableRows(rows []p11Row) [][]string {
	num := func(v float64, unit string) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmtNum(v) + unit
	}
	var out [][]string
	for _, r := range rows {
		median := "–"
		if !math.IsNaN(r.Median) {
			median = formatSeconds(r.Median)
		}
		n := fmt.Sprint(r.Samples)
		if r.Failed > 0 {
			n += fmt.Sprintf(" (+%d failed)", r.Failed)
		}
		target := ""
		if r.Method == MethodP11Waves && r.Samples > 0 {
			target = "met"
			var missed []string
			if r.Median > p11BoundFactor*r.Bound {
				missed = append(missed, fmt.Sprintf("time > %g × bound", p11BoundFactor))
			}
			if r.Served > p11ServedFactor {
				missed = append(missed, fmt.Sprintf("served > %g × image", p11ServedFactor))
			}
			if len(missed) > 0 {
				target = "missed: " + strings.Join(missed, ", ")
			}
		}
		out = append(out, []string{fmt.Sprint(r.N), r.Method, median, n, formatSeconds(r.Bound),
			num(Ratio(r.Median, r.Bound), "×"), num(r.Served, "×"), num(r.ServedByNode1, "×"), target})
	}
	return out
}
