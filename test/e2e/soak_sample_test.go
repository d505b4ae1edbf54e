package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crimux/crimux/test/soak"
)

// soakMetrics are what TestSoak samples, in soakSample's order.
var soakMetrics = []soak.Metric{
	{Key: "rss_mib", Title: "RSS (MiB)", Decimals: 1},
	{Key: "goroutines", Title: "goroutines", Floor: 1},
	{Key: "open_fds", Title: "open fds", Floor: 1},
	{Key: "store_kib", Title: "store (KiB)"},
	{Key: "libvirt_conns", Title: "libvirt connections", Floor: 1},
}

// sample samples the running crimux (waiting until it is soakMinAge
// old), the killer held off meanwhile:
//
//   - RSS: VmRSS of /proc/<pid>/status;
//   - goroutines: go_goroutines of crimux's own /metrics (the Go
//     collector's runtime.NumGoroutine), over a connection closed after
//     it (the scrape's own goroutine is in every sample alike);
//   - open fds: the entries of /proc/<pid>/fd, read before the scrape;
//
// the goroutines and fds each the least of soakReads reads a second
// apart: a leaked one stays, one that a request or a timer holds for a
// moment does not (single reads of a settled crimux differed by up to 4
// fds);
//   - store size: <state dir>/vm.db's size (bbolt grows the file and
//     never shrinks it, so it shows the store's high-water mark);
//   - libvirt connections: libvirtd's clients (virt-admin
//     srv-clients-list libvirtd) whose unix_process_id (virt-admin
//     client-info) is crimux's pid: libvirtd's own count, where a socket
//     in crimux's fds could be anything.
func (s *soaker) sample() {
	s.ch.mu.Lock()
	for age := time.Since(s.started); age < soakMinAge; age = time.Since(s.started) {
		s.ch.mu.Unlock()
		time.Sleep(soakMinAge - age)
		s.ch.mu.Lock()
	}
	defer s.ch.mu.Unlock()
	pid := s.c.cmd.Process.Pid
	smp := soak.Sample{At: time.Since(s.begun), Process: s.process, Age: time.Since(s.started)}
	read := func(what string, f func() (float64, error)) float64 {
		v, err := f()
		if err != nil {
			s.t.Logf("sample at minute %.1f: %s: %v", smp.At.Minutes(), what, err)
			return math.NaN()
		}
		return v
	}
	rss := read("RSS", func() (float64, error) { return procRSSMiB(pid) })
	var fdKinds string
	fds := read("open fds", func() (float64, error) {
		least := math.Inf(1)
		return leastOf(func() (float64, error) {
			n, kinds, err := openFDs(pid)
			if err == nil && n < least {
				least, fdKinds = n, kinds
			}
			return n, err
		})
	})
	store := read("store", func() (float64, error) {
		fi, err := os.Stat(filepath.Join(s.c.stateDir, "vm.db"))
		if err != nil {
			return 0, err
		}
		return float64(fi.Size()) / 1024, nil
	})
	conns := read("libvirt connections", func() (float64, error) { return libvirtClientsOf(pid) })
	goroutines := read("goroutines", func() (float64, error) {
		return leastOf(func() (float64, error) { return scrapeGoroutines(s.metricsAddr) })
	})
	smp.Values = []float64{rss, goroutines, fds, store, conns}
	s.samples = append(s.samples, smp)
	s.t.Logf("sample at minute %.1f (crimux %d, pid %d, up %s): RSS %.1f MiB, %g goroutines, %g fds (%s), store %g KiB, %g libvirt connections",
		smp.At.Minutes(), smp.Process, pid, smp.Age.Round(time.Second), rss, goroutines, fds, fdKinds, store, conns)
}

// soakReads is how many reads of the goroutines and fds a sample takes
// the least of.
const soakReads = 3

// socketKinds names a process's sockets by inode, from its network
// namespace's tables: "tcp listen :<port>", "tcp -> :<remote port>",
// "unix <path>" (a bound one) or "unix".
func socketKinds(pid int) map[string]string {
	out := map[string]string{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, local, _ := strings.Cut(f[1], ":")
			_, remote, _ := strings.Cut(f[2], ":")
			lp, _ := strconv.ParseUint(local, 16, 16)
			rp, _ := strconv.ParseUint(remote, 16, 16)
			if f[3] == "0A" { // LISTEN
				out[f[9]] = fmt.Sprintf("tcp listen :%d", lp)
			} else {
				out[f[9]] = fmt.Sprintf("tcp -> :%d", rp)
			}
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		out[f[6]] = "unix"
		if len(f) > 7 {
			out[f[6]] = "unix " + f[7]
		}
	}
	return out
}

// leastOf is the least of soakReads values of read, a second apart.
func leastOf(read func() (float64, error)) (float64, error) {
	least := math.Inf(1)
	for i := 0; i < soakReads; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		v, err := read()
		if err != nil {
			return 0, err
		}
		least = math.Min(least, v)
	}
	return least, nil
}

// openFDs counts a process's open fds, and says what they are: each
// kind (socket, pipe, anon_inode:[eventpoll], a file's path) with its
// count.
func openFDs(pid int) (float64, string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, "", err
	}
	sockets := socketKinds(pid)
	kinds := map[string]int{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since listed
		}
		kind, inode, _ := strings.Cut(target, ":[") // socket:[123] -> socket
		switch {
		case strings.HasPrefix(target, "anon_inode:"):
			kind = target
		case kind == "socket" && sockets[strings.TrimSuffix(inode, "]")] != "":
			kind = sockets[strings.TrimSuffix(inode, "]")]
		}
		kinds[kind]++
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n))
	}
	slices.Sort(parts)
	return float64(len(entries)), strings.Join(parts, " "), nil
}

// procRSSMiB is a process's resident set, in MiB.
func procRSSMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	kib, err := strconv.ParseFloat(string(m[1]), 64)
	return kib / 1024, err
}

// scrapeGoroutines reads go_goroutines from crimux's metrics.
func scrapeGoroutines(addr string) (float64, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var resp *http.Response
		if resp, err = client.Get("http://" + addr + "/metrics"); err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := regexp.MustCompile(`(?m)^go_goroutines (\S+)$`).FindSubmatch(b); m != nil {
				return strconv.ParseFloat(string(m[1]), 64)
			}
			err = fmt.Errorf("no go_goroutines in /metrics (%v): %.200s", rerr, b)
		}
		time.Sleep(time.Second)
	}
	return 0, err
}

// libvirtClientsOf counts libvirtd's clients that are process pid.
func libvirtClientsOf(pid int) (float64, error) {
	out, err := exec.Command("virt-admin", "srv-clients-list", "libvirtd").Output()
	if err != nil {
		return 0, fmt.Errorf("virt-admin srv-clients-list libvirtd: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue // the header
		}
		info, err := exec.Command("virt-admin", "client-info", "libvirtd", f[0]).Output()
		if err != nil {
			continue // gone since listed
		}
		m := regexp.MustCompile(`(?m)^unix_process_id\s*:\s*(\d+)\s*$`).FindSubmatch(info)
		if m != nil && string(m[1]) == strconv.Itoa(pid) {
			n++
		}
	}
	return float64(n), nil
}

// soakOut is CRIMUX_SOAK_OUT, a path without its extension (relative to
// the repository), or "" for no files.
func soakOut() string {
	out := os.Getenv("CRIMUX_SOAK_OUT")
	if out != "" && !filepath.IsAbs(out) {
		out = filepath.Join(repoRoot(), out)
	}
	return out
}

// publish checks the samples, prints the figures and writes them to
// out.md (a section to paste into a dated file under docs/bench/) and out.svg; once
// only: deferred with cutShort, it does nothing after the end was
// reached.
func (s *soaker) publish(out string, cutShort bool) []soak.Growth {
	if s.published {
		return nil
	}
	s.published = true
	s.ch.mu.Lock() // the killer may still run when a failure cut the run short
	kills := append([]time.Duration(nil), s.kills...)
	s.ch.mu.Unlock()
	win := soak.WindowsFor(s.duration)
	growth := soak.Check(soakMetrics, s.samples, win, soakLimit)
	summary := s.summary(len(kills), cutShort)
	fmt.Println(summary)
	if win.Scaled {
		fmt.Printf("soak: a run under 30 minutes: its first third is the warm-up, minutes %.1f–%.1f are compared with %.1f–end (an hour compares 10–20 with 50–60)\n",
			win.Base[0].Minutes(), win.Base[1].Minutes(), win.Final.Minutes())
	}
	for _, g := range growth {
		fmt.Println(g.Line())
	}
	s.t.Log(summary)
	if out == "" {
		return growth
	}
	title := fmt.Sprintf("crimux over %s of churn, %d kills: each metric ÷ its median in minutes %.1f–%.1f",
		s.churnLength().Round(time.Second), len(kills), win.Base[0].Minutes(), win.Base[1].Minutes())
	var svg bytes.Buffer
	if err := soak.WriteSVG(&svg, soak.Plot{Title: title, Metrics: soakMetrics, Samples: s.samples, Windows: win,
		Growth: growth, Kills: kills, Limit: soakLimit}); err != nil {
		s.t.Errorf("plot: %v", err)
	}
	var md bytes.Buffer
	fmt.Fprintf(&md, "<!-- written by TestSoak (make soak) at %s UTC: paste into a dated file under docs/bench/ (as history-2026-12.md, \"An hour of churn\") -->\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(&md, "%s\n\n", summary)
	if win.Scaled {
		fmt.Fprintf(&md, "A run under 30 minutes: its first third is the warm-up; minutes %.1f–%.1f are compared with %.1f–end.\n\n",
			win.Base[0].Minutes(), win.Base[1].Minutes(), win.Final.Minutes())
	}
	_ = soak.WriteGrowth(&md, growth, win, soakLimit)
	fmt.Fprintf(&md, "\n![soak](bench/%s.svg)\n\n<details><summary>The %d samples</summary>\n\n", filepath.Base(out), len(s.samples))
	_ = soak.WriteSamples(&md, soakMetrics, s.samples)
	md.WriteString("\n</details>\n")
	for ext, b := range map[string][]byte{".svg": svg.Bytes(), ".md": md.Bytes()} {
		if err := os.WriteFile(out+ext, b, 0o644); err != nil {
			s.t.Errorf("write the figures: %v", err)
		}
	}
	s.t.Logf("figures written to %s.md and %s.svg", out, out)
	return growth
}

// churnLength is how long the churn ran (so far, when cut short).
func (s *soaker) churnLength() time.Duration {
	if s.churn > 0 || s.begun.IsZero() {
		return s.churn
	}
	return time.Since(s.begun)
}

// summary is the run in one line.
func (s *soaker) summary(kills int, cutShort bool) string {
	c := s.counts
	line := fmt.Sprintf("soak: %s of churn (CRIMUX_SOAK=%s): %d rounds, %d container pods, %d VM pods, %d execs, %d snapshots made and deleted, %d power changes, %d kills, %d samples",
		s.churnLength().Round(time.Second), s.duration, c.rounds, c.containerPods, c.vmPods, c.execs, c.snapshots, c.powerChanges, kills, len(s.samples))
	switch {
	case cutShort:
		line += "; CUT SHORT by a failure, leaks not counted"
	case s.leaks != nil:
		l := s.leaks
		line += fmt.Sprintf("; %d leaked domains, %d leaked disks, %d leaked netns, %d leaked cgroups, %d leaked IPs, %d VMs recreated",
			l["domains"], l["disks"], l["netns"], l["cgroups"], l["ips"], s.recreated)
	}
	return line
}
