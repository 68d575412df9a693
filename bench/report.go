package bench

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// Report is a benchmark run's results.
type Report struct {
	Settings Settings   `json:"settings"`
	Queries  []Result   `json:"queries"`
	Summary  []Summary  `json:"summary"`
	Sweep    []Level    `json:"sweep,omitempty"`
	Failures []string   `json:"failures,omitempty"`
	Paper    []PaperRow `json:"paper"`
}

// Settings say how the run was made.
type Settings struct {
	LatencyMS float64 `json:"latency_ms"`
	Apps      int     `json:"apps_installed"`
	CPUs      int     `json:"cpus"`
	Started   string  `json:"started"`
	DurationS float64 `json:"duration_s"`
	// Machine is what this machine charges for kernel entries.
	Machine Machine `json:"machine"`
}

// Summary is one row of the table: a category, or the paper's four
// categories together, unweighted or weighted to the paper's mix.
type Summary struct {
	Name string `json:"name"`
	N    int    `json:"queries"`
	Cold Stats  `json:"cold"`
	Warm Stats  `json:"warm"`
}

// Stats describe the overhead of isolated mode over vanilla mode.
type Stats struct {
	IsolatedMS float64 `json:"isolated_mean_ms"`
	VanillaMS  float64 `json:"vanilla_mean_ms"`
	// P50 … P95 are percentiles of the per-query overhead (isolated time
	// over vanilla time, minus one).
	P50 float64 `json:"overhead_p50"`
	P75 float64 `json:"overhead_p75"`
	P90 float64 `json:"overhead_p90"`
	P95 float64 `json:"overhead_p95"`
	// Under is the share of queries with an overhead under 0.3.
	Under    float64 `json:"share_under_0.3"`
	Isolated Usage   `json:"isolated"`
	Vanilla  Usage   `json:"vanilla"`
	// CallsRatio and BytesRatio are isolated's model calls and prompt
	// bytes over vanilla's, each query weighted as in the row (Isolated
	// and Vanilla are plain sums).
	CallsRatio float64 `json:"model_calls_ratio"`
	BytesRatio float64 `json:"prompt_bytes_ratio"`
}

// PaperRow is the paper's figure for a row of the table, for the reader
// to compare (GPT-4, 103 queries; IsolateGPT, NDSS 2025, Table IV and §VII).
type PaperRow struct {
	Name     string  `json:"name"`
	Overhead float64 `json:"mean_overhead"`
}

// paperRows are the paper's mean overheads per category (isolated total
// over vanilla total, minus one), and overall its p75 ≈ 0.3 and p95 1.80.
var paperRows = []PaperRow{{string(Single), 0.22}, {string(Multi), 1.16}, {string(Chain), 0.99}, {string(NoApp), 0.10}}

// The overall rows.
const (
	overall      = "overall"
	overallPaper = "overall, paper's mix"
)

// summarize fills Summary and Failures from Queries.
func (r *Report) summarize() {
	r.Paper = paperRows
	by := map[Category][]Result{}
	for _, q := range r.Queries {
		by[q.Category] = append(by[q.Category], q)
		for _, run := range []struct {
			what string
			run  Measure
		}{{"cold isolated", q.Cold.Isolated}, {"cold vanilla", q.Cold.Vanilla}, {"warm isolated", q.Warm.Isolated}, {"warm vanilla", q.Warm.Vanilla}} {
			if run.run.Error != "" {
				r.Failures = append(r.Failures, fmt.Sprintf("%s, %s: %s", clip(q.Text, 60), run.what, run.run.Error))
			}
		}
	}
	var paper []Result
	var weights []float64
	for _, c := range Categories {
		if len(by[c]) == 0 {
			continue
		}
		r.Summary = append(r.Summary, summarize(string(c), by[c], nil))
		if w, ok := PaperMix[c]; ok {
			paper = append(paper, by[c]...)
			for range by[c] {
				weights = append(weights, w/float64(len(by[c])))
			}
		}
	}
	if len(paper) > 0 {
		r.Summary = append(r.Summary, summarize(overall, paper, nil), summarize(overallPaper, paper, weights))
	}
}

// summarize describes results, each with its weight (nil: equal).
func summarize(name string, results []Result, weights []float64) Summary {
	s := Summary{Name: name, N: len(results)}
	for _, phase := range []struct {
		stats *Stats
		pair  func(Result) Pair
	}{{&s.Cold, func(r Result) Pair { return r.Cold }}, {&s.Warm, func(r Result) Pair { return r.Warm }}} {
		var over, wsum float64
		var calls, bytes [2]float64 // isolated, vanilla; weighted
		overheads := make([]float64, len(results))
		st := phase.stats
		for i, res := range results {
			p := phase.pair(res)
			w := 1.0
			if weights != nil {
				w = weights[i]
			}
			st.IsolatedMS += w * p.Isolated.MS
			st.VanillaMS += w * p.Vanilla.MS
			overheads[i] = p.Overhead
			if p.Overhead < 0.3 {
				over += w
			}
			wsum += w
			st.Isolated.add(p.Isolated.Usage)
			st.Vanilla.add(p.Vanilla.Usage)
			calls[0] += w * float64(p.Isolated.Calls)
			calls[1] += w * float64(p.Vanilla.Calls)
			bytes[0] += w * float64(p.Isolated.PromptBytes)
			bytes[1] += w * float64(p.Vanilla.PromptBytes)
		}
		st.IsolatedMS /= wsum
		st.VanillaMS /= wsum
		st.Under = over / wsum
		st.P50 = percentile(overheads, weights, 0.50)
		st.P75 = percentile(overheads, weights, 0.75)
		st.P90 = percentile(overheads, weights, 0.90)
		st.P95 = percentile(overheads, weights, 0.95)
		st.CallsRatio = ratio(calls[0], calls[1])
		st.BytesRatio = ratio(bytes[0], bytes[1])
	}
	return s
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// percentile is the smallest value v such that the values up to v weigh
// at least q of the total (nearest rank; weights nil counts each once).
func percentile(values, weights []float64, q float64) float64 {
	if len(values) == 0 {
		return 0
	}
	idx := make([]int, len(values))
	total := 0.0
	for i := range idx {
		idx[i] = i
		total += weight(weights, i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return values[idx[a]] < values[idx[b]] })
	cum := 0.0
	for _, i := range idx {
		cum += weight(weights, i)
		if cum >= q*total-1e-9 {
			return values[i]
		}
	}
	return values[idx[len(idx)-1]]
}

func weight(weights []float64, i int) float64 {
	if weights == nil {
		return 1
	}
	return weights[i]
}

// Print writes the report as tables.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "secgpt bench: %d queries, %d apps installed, simulated model latency %.0f ms, %d CPUs, %.0f s\n\n",
		len(r.Queries), r.Settings.Apps, r.Settings.LatencyMS, r.Settings.CPUs, r.Settings.DurationS)
	fmt.Fprintf(w, "This machine: %s.\n\n", r.Settings.Machine)
	if len(r.Queries) > 0 {
		r.printQueries(w)
	}
	if len(r.Sweep) > 0 {
		fmt.Fprintln(w, "\nUsers arriving at once, one single-app query each, isolated, on a fresh system per number of users: new users (cold) on a bot")
		fmt.Fprintln(w, "that has seen no demand yet; at rest, as many other new users on the bot that has now seen such a burst (its spares")
		fmt.Fprintln(w, "learned it); at rest, these again (warm). p95/single is over the one-user p50 of the same row's kind:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "users\t\tspares waiting\tp50 ms\tp95 ms\tp95/single\tqueries/s\tCPU ms/query\tspokes' CPU ms/query\tfaults/query hub+spokes\tswitches/query hub+spokes\tprocesses\tRSS MiB\tPSS MiB\thub RSS MiB\terrors\t")
		for _, l := range r.Sweep {
			for _, b := range []struct {
				name string
				b    Burst
			}{{"cold, new bot", l.Cold}, {"cold, learned", l.Learned}, {"warm", l.Warm}} {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f+%.0f\t%.0f+%.0f\t%d\t%.0f\t%.0f\t%.0f\t%d\t\n", l.Users, b.name, b.b.Spares,
					b.b.P50MS, b.b.P95MS, b.b.VsSingle, b.b.Throughput, b.b.CPUMSPerQuery, b.b.SpokeCPUMSPerQuery,
					b.b.FaultsPerQuery, b.b.SpokeFaultsPerQuery, b.b.SwitchesPerQuery, b.b.SpokeSwitchesPerQuery, b.b.Processes, b.b.SpokeRSS, b.b.SpokePSS, b.b.HubRSS, b.b.Errors)
			}
		}
		tw.Flush()
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(w, "\n%d runs FAILED:\n  %s\n", len(r.Failures), strings.Join(r.Failures, "\n  "))
	}
}

// printQueries writes the queries' tables: isolated against vanilla,
// cold and warm.
func (r *Report) printQueries(w io.Writer) {
	for _, phase := range []struct {
		name  string
		stats func(Summary) Stats
	}{{"cold (a new user: every spoke starts)", func(s Summary) Stats { return s.Cold }}, {"warm (the same query again)", func(s Summary) Stats { return s.Warm }}} {
		fmt.Fprintf(w, "Isolated against vanilla, %s; overhead = isolated time / vanilla time - 1:\n", phase.name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "category\tn\tisolated ms\tvanilla ms\tp50\tp75\tp90\tp95\tunder 0.3x\tmodel calls iso/van\tprompt bytes iso/van\t")
		for _, s := range r.Summary {
			st := phase.stats(s)
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f %%\t%.2fx\t%.2fx\t\n",
				s.Name, s.N, st.IsolatedMS, st.VanillaMS, st.P50, st.P75, st.P90, st.P95, 100*st.Under, st.CallsRatio, st.BytesRatio)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "The paper (GPT-4, 103 queries, cold) had mean overheads of "+paperSummary()+"; overall p75 ≈ 0.3, p95 1.80, 75.7 % under 0.3x.")
}

func paperSummary() string {
	var parts []string
	for _, p := range slices.Clone(paperRows) {
		parts = append(parts, fmt.Sprintf("%s %.2f", p.Name, p.Overhead))
	}
	return strings.Join(parts, ", ")
}
