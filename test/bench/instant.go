package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// The instant start's figures: the Debian guest pod of the guest phase
// (2 vCPUs, 1 GiB), asking for its template (the pod annotation
// crimux.io/start: template), restored from it and made itself, timed as
// vm_guest_ready_s times the cold boot: from RunPodSandbox until its guest
// agent answers guest-ping. The template is made first through the VM API
// (WarmTemplate), untimed. A clone that booted instead (its log says so)
// is a failed round, never a sample. instant_burst.go starts many clones
// at once; instant_mem.go reads what a clone's qemu holds of the host's
// memory beside a cold-booted one's.

var instantFigures = []string{"vm_instant_ready_s", "vm_instant_over_guest_ratio",
	"vm_instant_burst_20_p50_s", "vm_instant_burst_20_p95_s",
	"vm_instant_clone_rss_mib", "vm_cold_guest_rss_mib", "vm_instant_clone_pss_mib"}

const (
	// templateWarmTimeout bounds WarmTemplate: the template's guest boots
	// once under TCG, settles (cloud-init done) and is saved, which takes
	// minutes on 2 cores.
	templateWarmTimeout = 15 * time.Minute
	// instantColdRounds are the cold boots the ratio takes when the guest
	// phase did not measure vm_guest_ready_s in this run.
	instantColdRounds = 3
	// startNoteWait bounds the wait for crimux's line on how a VM
	// started: written into its CRI log before StartContainer returns
	// (criservice.StartNotice), so it is there at once.
	startNoteWait = 10 * time.Second
)

// crimux's lines in a VM's log on how it started (criservice's
// restoredMessageTemplate and coldMessagePrefix).
const (
	restoredNote = "restored from template"
	coldNote     = "boots instead of starting from its template"
)

// instantShape is the figures' shape, for their notes.
const instantShape = "Debian 12 (crimux/vm-debian), 2 vCPUs, 1 GiB, TCG"

// asksTemplate makes a pod config ask for its template, named as
// crimuxGuestRound names its pod's host.
func asksTemplate(name string) func(*runtimeapi.PodSandboxConfig) {
	return func(p *runtimeapi.PodSandboxConfig) {
		p.Hostname = name
		p.Annotations = map[string]string{vm.AnnotationStart: vm.StartTemplate}
	}
}

// warmTemplate makes the Debian guest's template in the guest pod's
// shape, for the bench's namespace (its pods', vmpods.go), through the
// VM API and returns its key.
func (b *bench) warmTemplate(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, templateWarmTimeout)
	defer cancel()
	t0 := time.Now()
	resp, err := vmv1.NewVMServiceClient(b.cri.Conn).WarmTemplate(ctx, &vmv1.WarmTemplateRequest{
		Image: debianImage, Vcpus: guestVCPUs, MemoryMib: guestMiB, Namespace: namespace,
	})
	if status.Code(err) == codes.Unimplemented {
		return "", errVMAPIMissing
	}
	if err != nil {
		return "", fmt.Errorf("warm the template of %s: %w", debianImage, err)
	}
	t := resp.GetTemplate()
	if t.GetState() != "ready" {
		return t.GetKey(), fmt.Errorf("template %s of %s is %s: %s", t.GetKey(), debianImage, t.GetState(), t.GetError())
	}
	b.logf("instant: template %s (%d vCPUs, %d MiB, %s) warmed in %s, %d MiB of files", t.GetKey(), t.GetVcpus(), t.GetMemoryMib(),
		t.GetAccel(), time.Since(t0).Round(100*time.Millisecond), t.GetSizeBytes()>>20)
	return t.GetKey(), nil
}

// removeTemplate removes the run's template (its files are a saved 1 GiB
// guest and its disk's writes); the state dir's removal would too.
func (b *bench) removeTemplate(ctx context.Context, key string) {
	if key == "" {
		return
	}
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	if _, err := vmv1.NewVMServiceClient(b.cri.Conn).RemoveTemplate(ctx, &vmv1.RemoveTemplateRequest{Key: key}); err != nil {
		b.logf("instant: removing template %s: %v", key, err)
	}
}

// howStarted is crimux's line in v's log on how its VM started if it
// was restored from its template, an error saying why not otherwise.
func howStarted(ctx context.Context, v *vmPod) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, startNoteWait)
	defer cancel()
	var restored, cold string
	err := waitUntil(ctx, 100*time.Millisecond, func() error {
		data, err := os.ReadFile(v.logPath)
		if err != nil {
			return err
		}
		restored, cold = noteLine(data, restoredNote), noteLine(data, coldNote)
		if restored == "" && cold == "" {
			return fmt.Errorf("no line of crimux's on how VM %s started in %s (%d bytes)", v.name, v.logPath, len(data))
		}
		return nil
	})
	switch {
	case err != nil:
		return "", err
	case cold != "":
		return "", fmt.Errorf("VM %s booted cold: %s", v.name, cold)
	}
	return restored, nil
}

// noteLine is the first line of a CRI log holding what, from crimux's
// "crimux: " on (the CRI log's time and stream cut off); "" if none.
func noteLine(log []byte, what string) string {
	for _, l := range strings.Split(string(log), "\n") {
		if !strings.Contains(l, what) {
			continue
		}
		if i := strings.Index(l, "crimux: "); i >= 0 {
			l = l[i:]
		}
		return l
	}
	return ""
}

// instantRound starts a Debian guest pod asking for its template and
// times it from RunPodSandbox until its guest agent answers; a VM that
// booted instead fails the round. after (may be nil) runs on the ready
// clone, untimed, before it is removed.
func (b *bench) instantRound(ctx context.Context, name string, after func(*vmPod) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, guestReadyTimeout)
	defer cancel()
	t0 := time.Now()
	v, err := b.startVMWith(ctx, name, b.guestContainerConfig(), asksTemplate(name))
	defer func() {
		if v != nil {
			_ = b.removeVM(context.WithoutCancel(ctx), v)
		}
	}()
	if err != nil {
		return 0, err
	}
	if err := waitAgent(ctx, b.direct, v.domain()); err != nil {
		return 0, fmt.Errorf("guest agent of %s: %w", v.domain(), err)
	}
	took := time.Since(t0)
	line, err := howStarted(ctx, v)
	if err != nil {
		return 0, err
	}
	b.logf("instant %s: agent answers after %.2fs; %s", name, took.Seconds(), line)
	if after != nil {
		if err := after(v); err != nil {
			return took, err
		}
	}
	return took, nil
}

// phaseInstant warms the template, then times instantRounds clones one
// at a time, the ratio to the cold boot, each guest's memory and the
// burst of clones.
func (b *bench) phaseInstant(ctx context.Context) error {
	if err := criclient.Pull(ctx, b.cri, debianImage); err != nil {
		return err
	}
	key, err := b.warmTemplate(ctx)
	defer b.removeTemplate(context.WithoutCancel(ctx), key)
	if err != nil {
		return err
	}
	var c stats.Samples
	var failed []error
	for i := range b.opts.instantRounds {
		t, err := b.instantRound(ctx, fmt.Sprintf("instant-%d", i), nil)
		if err != nil {
			failed = append(failed, err)
			b.logf("instant round %d failed: %v", i, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		c = append(c, t)
	}
	b.samplesOf("VMInstantReady", nil, c)
	b.logf("instant: agent answers after %s", c.Summary(0.5, 0.9, 1))
	if len(c) > 0 {
		b.res.Set("vm_instant_ready_s", c.Median().Seconds(), c.Summary(0.5, 0.9), "")
	}
	b.res.Note("vm_instant_ready_s", "%s, the pod annotated crimux.io/start: template, its template warmed first (WarmTemplate, untimed); "+
		"a round counts only if the VM's log says it was restored from its template", instantShape)
	if len(failed) > 0 {
		b.res.Note("vm_instant_ready_s", "%d of %d rounds failed, first: %v", len(failed), b.opts.instantRounds, failed[0])
	}
	if len(c) == 0 {
		// Every clone booted or failed: the rest would boot 20 guests cold.
		first := errors.New("no rounds (-instant-rounds)")
		if len(failed) > 0 {
			first = failed[0]
		}
		return fmt.Errorf("no clone restored from template %s in %d rounds, first: %w", key, b.opts.instantRounds, first)
	}
	b.instantRatio(ctx, c)
	errs := []error{b.guestMemories(ctx), b.phaseInstantBurst(ctx, b.opts.instantBurst)}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// instantRatio is vm_instant_over_guest_ratio: the clones' median over
// this run's vm_guest_ready_s, or over instantColdRounds cold boots of
// its own when the guest phase did not measure it.
func (b *bench) instantRatio(ctx context.Context, c stats.Samples) {
	const name = "vm_instant_over_guest_ratio"
	cold, from := b.res.Get("vm_guest_ready_s").Value, "vm_guest_ready_s of this run's guest phase"
	if math.IsNaN(cold) {
		var s stats.Samples
		var failed []error
		for i := range instantColdRounds {
			t, err := b.crimuxGuestRound(ctx, b.direct, fmt.Sprintf("instant-cold-%d", i))
			if err != nil {
				failed = append(failed, err)
				b.logf("instant: cold round %d failed: %v", i, err)
				if ctx.Err() != nil {
					break
				}
				continue
			}
			s = append(s, t)
		}
		b.samplesOf("VMInstantColdReady", nil, s)
		b.logf("instant: cold guest's agent answers after %s", s.Summary(0.5, 1))
		cold, from = math.NaN(), fmt.Sprintf("the median of %d cold boots of its own (crimuxGuestRound; the guest phase did not run)", len(s))
		if len(s) > 0 {
			cold = s.Median().Seconds()
		}
		if len(failed) > 0 {
			from += fmt.Sprintf("; %d of %d cold rounds failed, first: %v", len(failed), instantColdRounds, failed[0])
		}
	}
	if len(c) > 0 && !math.IsNaN(cold) {
		inst := c.Median().Seconds()
		b.res.Set(name, inst/cold, fmt.Sprintf("%.2f s", inst), fmt.Sprintf("%.2f s cold", cold))
	}
	b.res.Note(name, "%s; clone and cold boot alike from RunPodSandbox to guest-ping; the cold side is %s", instantShape, from)
}
