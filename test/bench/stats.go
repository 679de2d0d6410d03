package bench

import (
	"math"
	"slices"
	"strconv"
)

// Float is a float64 that encodes NaN (no data) and infinities as JSON null.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// Median is the middle value of xs (the mean of the two middle values for an
// even count), NaN when xs is empty. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile is the nearest-rank p-th percentile of xs (0 < p ≤ 100): the
// smallest value with at least p% of the values at or below it. With 50
// values, p99 is the largest. NaN when xs is empty or p is out of range.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || p <= 0 || p > 100 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

// Ratio is a/b, NaN when either is NaN or b is 0.
func Ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// Stat summarises the samples of one method in one scenario.
type Stat struct {
	Scenario string `json:"scenario"`
	Method   string `json:"method"`
	N        int    `json:"n"`                // successful samples
	Failed   int    `json:"failed,omitempty"` // failed samples
	// Seconds: the median, the extremes and the nearest-rank p50 and p99.
	Median Float `json:"median_seconds"`
	Min    Float `json:"min_seconds"`
	Max    Float `json:"max_seconds"`
	P50    Float `json:"p50_seconds"`
	P99    Float `json:"p99_seconds"`
	// Medians of the CPU times, and the largest RSS.
	ClientCPU     Float `json:"median_client_cpu_seconds"`
	ContainerdCPU Float `json:"median_containerd_cpu_seconds"`
	OtherCPU      Float `json:"median_other_cpu_seconds"`
	MaxRSSBytes   int64 `json:"max_rss_bytes,omitempty"`
	// Bytes is the largest byte count of a sample (they are all the same).
	Bytes int64 `json:"bytes,omitempty"`
	// ImportMedian and AfterImportMedian are, for P8's peer method, the
	// medians of the samples' ImportSeconds (node A's import) and of the
	// rest of their Seconds (node B's pull and pin); 0 for the other methods.
	ImportMedian      Float `json:"median_import_seconds,omitempty"`
	AfterImportMedian Float `json:"median_after_import_seconds,omitempty"`
}

// MBPerSecond is the stat's bytes over its median time, in MB/s (10^6 bytes);
// NaN without bytes or time.
func (s Stat) MBPerSecond() float64 {
	if s.Bytes <= 0 {
		return math.NaN()
	}
	return Ratio(float64(s.Bytes)/1e6, float64(s.Median))
}

// computeStats groups samples by scenario and method, in the order they
// first appear.
func computeStats(samples []Sample) []Stat {
	type key struct{ scenario, method string }
	var order []key
	by := map[key][]Sample{}
	for _, s := range samples {
		k := key{s.Scenario, s.Method}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], s)
	}
	var stats []Stat
	for _, k := range order {
		st := Stat{Scenario: k.scenario, Method: k.method}
		var secs, client, cd, other, imports, after []float64
		for _, s := range by[k] {
			if s.Error != "" {
				st.Failed++
				continue
			}
			secs = append(secs, s.Seconds)
			client = append(client, s.ClientCPUSeconds)
			cd = append(cd, s.ContainerdCPUSeconds)
			other = append(other, s.OtherCPUSeconds)
			if s.ImportSeconds > 0 {
				imports = append(imports, s.ImportSeconds)
				after = append(after, s.Seconds-s.ImportSeconds)
			}
			st.MaxRSSBytes = max(st.MaxRSSBytes, s.MaxRSSBytes)
			st.Bytes = max(st.Bytes, s.Bytes)
		}
		st.N = len(secs)
		st.Median, st.P50, st.P99 = Float(Median(secs)), Float(Percentile(secs, 50)), Float(Percentile(secs, 99))
		st.Min, st.Max = Float(Percentile(secs, 0.0001)), Float(Percentile(secs, 100))
		st.ClientCPU, st.ContainerdCPU, st.OtherCPU = Float(Median(client)), Float(Median(cd)), Float(Median(other))
		if len(imports) > 0 {
			st.ImportMedian, st.AfterImportMedian = Float(Median(imports)), Float(Median(after))
		}
		stats = append(stats, st)
	}
	return stats
}

// findStat is the stat of a scenario and method, or nil.
func findStat(stats []Stat, scenario, method string) *Stat {
	for i := range stats {
		if stats[i].Scenario == scenario && stats[i].Method == method {
			return &stats[i]
		}
	}
	return nil
}
