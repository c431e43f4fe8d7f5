// Command loadreport joins what bench/soak and bench/overload record during a run: dnsload's per-bucket
// counts of the queries (-load, the JSON of dnsload -json), samples of the server process (-samples:
// RSS, goroutines, open descriptors, threads) and the events the script caused (-events: reloads,
// file rewrites, backends and resolvers going down and up). It writes one row per sample (-csv, the
// input of the plot), and either the soak report (-md) or a per-sample table on stdout (-table).
//
// Input files, all CSV without a header, times in seconds since the Unix epoch:
//
//	samples: TIME,RSS_KB,GOROUTINES,FDS,THREADS   (an empty field is a sample that could not be read)
//	events:  TIME,KIND,DETAIL
//
// A failed query (SERVFAIL, REFUSED, any other error rcode, or no answer within dnsload's timeout) is
// put next to the events shortly before it. Whether the design allows it is said per event kind with
// -expected: the kinds after which the rules say some queries may fail. Every other failure is one the
// rules say should not happen.
package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type options struct {
	load, samples, events string
	start                 float64
	bucket                time.Duration
	grace                 time.Duration
	expected              string
	csvOut, mdOut         string
	table                 bool
	title, command        string
	rules                 string
}

func main() {
	var o options
	flag.StringVar(&o.load, "load", "", "dnsload -json output (required)")
	flag.Float64Var(&o.start, "start", 0, "when dnsload started, seconds since the epoch (required)")
	flag.DurationVar(&o.bucket, "bucket", 100*time.Millisecond, "dnsload's -bucket")
	flag.StringVar(&o.samples, "samples", "", "samples CSV: TIME,RSS_KB,GOROUTINES,FDS,THREADS (required)")
	flag.StringVar(&o.events, "events", "", "events CSV: TIME,KIND,DETAIL")
	flag.DurationVar(&o.grace, "grace", 6*time.Second, "a failure this long after an event is put next to it")
	flag.StringVar(&o.expected, "expected", "", "comma-separated event kinds after which the rules allow failed queries")
	flag.StringVar(&o.rules, "rules", "", "file of `KIND<TAB>what the design says happens` lines, for the report")
	flag.StringVar(&o.csvOut, "csv", "", "write the joined series here")
	flag.StringVar(&o.mdOut, "md", "", "write the soak report (markdown) here")
	flag.BoolVar(&o.table, "table", false, "print a per-sample markdown table on stdout")
	flag.StringVar(&o.title, "title", "Soak run", "title of the report")
	flag.StringVar(&o.command, "command", "", "the command that made the run, for the report")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "loadreport:", err)
		os.Exit(1)
	}
}

// Bucket is one of dnsload's time buckets (its JSON fields).
type Bucket struct {
	Sent     int `json:"sent"`
	OK       int `json:"ok"`
	Failed   int `json:"failed"`
	Timeout  int `json:"timeout"`
	Refused  int `json:"refused"`
	Servfail int `json:"servfail"`
}

// Sample is one reading of the server process; a negative value could not be read.
type Sample struct {
	T                             float64
	RSSKB, Goroutines, FDs, Thrds float64
}

// Event is one thing the script did to the server or its surroundings.
type Event struct {
	T            float64
	Kind, Detail string
}

// Row is a sample joined with the queries sent since the previous sample.
type Row struct {
	Sample
	Rel                                          float64 // seconds since the load started
	Secs                                         float64 // length of the interval the counts cover
	Sent, OK, Failed, Refused, Servfail, Timeout int
}

func (r Row) bad() int { return r.Failed + r.Timeout }

func run(o options) error {
	if o.load == "" || o.samples == "" || o.start <= 0 {
		return errors.New("-load, -samples and -start are required")
	}
	if o.bucket <= 0 {
		return fmt.Errorf("-bucket %s must be positive", o.bucket)
	}
	var buckets []Bucket
	b, err := os.ReadFile(o.load)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &buckets); err != nil {
		return fmt.Errorf("%s: %v", o.load, err)
	}
	samples, err := readSamples(o.samples)
	if err != nil {
		return err
	}
	var events []Event
	if o.events != "" {
		if events, err = readEvents(o.events); err != nil {
			return err
		}
	}
	rules := map[string]string{}
	if o.rules != "" {
		if rules, err = readRules(o.rules); err != nil {
			return err
		}
	}
	rows := join(buckets, samples, o.start, o.bucket.Seconds())
	if o.csvOut != "" {
		if err := writeCSV(o.csvOut, rows, o.start, events); err != nil {
			return err
		}
	}
	if o.table {
		writeTable(os.Stdout, rows)
	}
	if o.mdOut != "" {
		f, err := os.Create(o.mdOut)
		if err != nil {
			return err
		}
		writeReport(f, o, buckets, rows, events, rules)
		return f.Close()
	}
	return nil
}

func readCSV(path string, fields int) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	var out [][]string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if len(rec) < fields {
			return nil, fmt.Errorf("%s: line %q has %d fields, want %d", path, strings.Join(rec, ","), len(rec), fields)
		}
		out = append(out, rec)
	}
}

func num(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return -1
	}
	return v
}

func readSamples(path string) ([]Sample, error) {
	recs, err := readCSV(path, 5)
	if err != nil {
		return nil, err
	}
	out := make([]Sample, 0, len(recs))
	for _, r := range recs {
		t := num(r[0])
		if t <= 0 {
			return nil, fmt.Errorf("%s: time %q is not seconds since the epoch", path, r[0])
		}
		out = append(out, Sample{T: t, RSSKB: num(r[1]), Goroutines: num(r[2]), FDs: num(r[3]), Thrds: num(r[4])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out, nil
}

func readEvents(path string) ([]Event, error) {
	recs, err := readCSV(path, 2)
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(recs))
	for _, r := range recs {
		e := Event{T: num(r[0]), Kind: r[1]}
		if len(r) > 2 {
			e.Detail = strings.Join(r[2:], ",")
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out, nil
}

func readRules(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for l := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(l, "\t")
		if ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// join gives each sample the queries whose bucket started after the previous sample and at or
// before this one (the first sample takes everything before it). Samples taken before the load
// started, or in its first half second, cover too short a time for a rate and are left out.
func join(buckets []Bucket, samples []Sample, start, width float64) []Row {
	rows := make([]Row, 0, len(samples))
	bi := 0
	prev := start
	for _, s := range samples {
		if s.T < start+0.5 {
			continue
		}
		r := Row{Sample: s, Rel: s.T - start, Secs: s.T - prev}
		for ; bi < len(buckets) && start+float64(bi)*width <= s.T; bi++ {
			b := buckets[bi]
			r.Sent += b.Sent
			r.OK += b.OK
			r.Failed += b.Failed
			r.Refused += b.Refused
			r.Servfail += b.Servfail
			r.Timeout += b.Timeout
		}
		if s.T > prev {
			prev = s.T
		}
		rows = append(rows, r)
	}
	return rows
}

func perSec(n int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

func writeCSV(path string, rows []Row, start float64, events []Event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "t_s,rss_mb,goroutines,fds,threads,answered_qps,sent_qps,failed,refused,servfail,timeout")
	for _, r := range rows {
		fmt.Fprintf(f, "%.1f,%s,%s,%s,%s,%.0f,%.0f,%d,%d,%d,%d\n", r.Rel, val(r.RSSKB/1024, r.RSSKB), val(r.Goroutines, r.Goroutines),
			val(r.FDs, r.FDs), val(r.Thrds, r.Thrds), perSec(r.OK, r.Secs), perSec(r.Sent, r.Secs), r.Failed, r.Refused, r.Servfail, r.Timeout)
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The events with their time since the start, for the plot's markers.
	g, err := os.Create(strings.TrimSuffix(path, ".csv") + "-events.csv")
	if err != nil {
		return err
	}
	fmt.Fprintln(g, "t_s,kind,detail")
	for _, e := range events {
		fmt.Fprintf(g, "%.1f,%s,%s\n", e.T-start, e.Kind, e.Detail)
	}
	return g.Close()
}

// val prints v, or an empty field when the reading (raw) failed.
func val(v, raw float64) string {
	if raw < 0 {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func writeTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| t s | sent/s | answered/s | REFUSED/s | SERVFAIL/s | other errors/s | no answer/s | RSS MB | goroutines | FDs |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s |\n", r.Rel, perSec(r.Sent, r.Secs), perSec(r.OK, r.Secs),
			perSec(r.Refused, r.Secs), perSec(r.Servfail, r.Secs), perSec(r.Failed-r.Refused-r.Servfail, r.Secs), perSec(r.Timeout, r.Secs),
			fmtv(r.RSSKB/1024, r.RSSKB, 1), fmtv(r.Goroutines, r.Goroutines, 0), fmtv(r.FDs, r.FDs, 0))
	}
}

func fmtv(v, raw float64, prec int) string {
	if raw < 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// series is one column of the rows with its name and unit, for the min/max table.
type series struct {
	name string
	prec int
	get  func(Row) float64 // negative: not read
}

var allSeries = []series{
	{"RSS MB", 1, func(r Row) float64 {
		if r.RSSKB < 0 {
			return -1
		}
		return r.RSSKB / 1024
	}},
	{"goroutines", 0, func(r Row) float64 { return r.Goroutines }},
	{"open FDs", 0, func(r Row) float64 { return r.FDs }},
	{"threads", 0, func(r Row) float64 { return r.Thrds }},
	{"answered q/s", 0, func(r Row) float64 { return perSec(r.OK, r.Secs) }},
	{"failed queries per sample", 0, func(r Row) float64 { return float64(r.bad()) }},
}

// stats of one series: min, max, and the medians of its first and last fifth (the drift).
func stats(rows []Row, get func(Row) float64) (lo, hi, first, last float64, ok bool) {
	var vs []float64
	for i, r := range rows {
		if i == 0 || i == len(rows)-1 { // partial intervals at both ends
			continue
		}
		if v := get(r); v >= 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, 0, 0, 0, false
	}
	lo, hi = slices.Min(vs), slices.Max(vs)
	n := max(1, len(vs)/5)
	return lo, hi, median(vs[:n]), median(vs[len(vs)-n:]), true
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// near returns the events at most grace before the interval [from, to], or inside it.
func near(events []Event, from, to, grace float64) []Event {
	var out []Event
	for _, e := range events {
		if e.T <= to && e.T >= from-grace {
			out = append(out, e)
		}
	}
	return out
}

func writeReport(w io.Writer, o options, buckets []Bucket, rows []Row, events []Event, rules map[string]string) {
	var tot Bucket
	for _, b := range buckets {
		tot.Sent += b.Sent
		tot.OK += b.OK
		tot.Failed += b.Failed
		tot.Refused += b.Refused
		tot.Servfail += b.Servfail
		tot.Timeout += b.Timeout
	}
	dur := float64(len(buckets)) * o.bucket.Seconds()
	fmt.Fprintf(w, "# %s\n\n", o.title)
	if o.command != "" {
		fmt.Fprintf(w, "Command: `%s`\n\n", o.command)
	}
	fmt.Fprintf(w, "- Load: %s (%d samples, one every %.0f s)\n", time.Duration(dur*float64(time.Second)).Round(time.Second), len(rows), sampleEvery(rows))
	fmt.Fprintf(w, "- Queries sent %d, answered %d, failed %d (REFUSED %d, SERVFAIL %d, other rcodes or send errors %d, no answer in time %d)\n\n",
		tot.Sent, tot.OK, tot.Failed+tot.Timeout, tot.Refused, tot.Servfail, tot.Failed-tot.Refused-tot.Servfail, tot.Timeout)

	fmt.Fprintln(w, "## Churn events")
	fmt.Fprintln(w)
	counts := map[string]int{}
	var kinds []string
	for _, e := range events {
		if counts[e.Kind] == 0 {
			kinds = append(kinds, e.Kind)
		}
		counts[e.Kind]++
	}
	fmt.Fprintln(w, "| event | count | what the design says happens |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, k := range kinds {
		fmt.Fprintf(w, "| %s | %d | %s |\n", k, counts[k], rules[k])
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "## Series")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Min and max over the samples (the first and last, partial intervals left out); drift is the median of the")
	fmt.Fprintln(w, "last fifth of the run against the median of the first fifth.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| series | min | max | first fifth | last fifth | drift |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, s := range allSeries {
		lo, hi, first, last, ok := stats(rows, s.get)
		if !ok {
			fmt.Fprintf(w, "| %s | - | - | - | - | - |\n", s.name)
			continue
		}
		drift := "-"
		if first > 0 {
			drift = fmt.Sprintf("%+.1f %%", 100*(last-first)/first)
		}
		p := func(v float64) string { return strconv.FormatFloat(v, 'f', s.prec, 64) }
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", s.name, p(lo), p(hi), p(first), p(last), drift)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "## Failed queries")
	fmt.Fprintln(w)
	expected := map[string]bool{}
	for k := range strings.SplitSeq(o.expected, ",") {
		if k = strings.TrimSpace(k); k != "" {
			expected[k] = true
		}
	}
	var nExp, nUnexp int
	var lines []string
	prev := o.start
	for _, r := range rows {
		from := prev
		prev = r.T
		if r.bad() == 0 {
			continue
		}
		ev := near(events, from, r.T, o.grace.Seconds())
		var exp []string
		var names []string
		for _, e := range ev {
			if expected[e.Kind] && !slices.Contains(exp, e.Kind) {
				exp = append(exp, e.Kind)
			}
			names = append(names, fmt.Sprintf("%s %s at %.1f s", e.Kind, e.Detail, e.T-o.start))
		}
		verdict := "not expected by the rules"
		if len(exp) > 0 {
			verdict = "expected after " + strings.Join(exp, ", ")
			nExp += r.bad()
		} else {
			nUnexp += r.bad()
		}
		if len(names) == 0 {
			names = []string{"no churn event within " + o.grace.String()}
		}
		lines = append(lines, fmt.Sprintf("| %.1f..%.1f | %d | %d | %d | %d | %s | %s |", from-o.start, r.T-o.start, r.Refused, r.Servfail,
			r.Failed-r.Refused-r.Servfail, r.Timeout, strings.Join(names, "; "), verdict))
	}
	if len(lines) == 0 {
		fmt.Fprintln(w, "None: every query sent was answered with NOERROR or NXDOMAIN within dnsload's timeout.")
		return
	}
	fmt.Fprintf(w, "%d failed queries: %d after an event that the rules say may fail queries, %d that the rules say should not fail.\n\n",
		nExp+nUnexp, nExp, nUnexp)
	fmt.Fprintln(w, "| sample interval s | REFUSED | SERVFAIL | other | no answer | events shortly before | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func sampleEvery(rows []Row) float64 {
	if len(rows) < 2 {
		return 0
	}
	return math.Round((rows[len(rows)-1].T - rows[0].T) / float64(len(rows)-1))
}
