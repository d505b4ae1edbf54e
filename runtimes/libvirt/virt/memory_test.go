package virt

import (
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
)

func TestParsePluggedMemory(t *testing.T) {
	// As libvirt 9.0 shows a running domain's virtio-mem device.
	const live = `<domain type='qemu'><devices>
    <memory model='virtio-mem'>
      <target>
        <size unit='KiB'>1048576</size>
        <node>0</node>
        <block unit='KiB'>2048</block>
        <requested unit='KiB'>262144</requested>
        <current unit='KiB'>260096</current>
      </target>
      <alias name='virtiomem0'/>
    </memory></devices></domain>`
	p, ok, err := parsePluggedMemory(live)
	if err != nil || !ok || p != (MemoryPlug{SizeMiB: 1024, RequestedMiB: 256, CurrentMiB: 254}) {
		t.Fatalf("parse = %+v, %v, %v", p, ok, err)
	}
	if _, ok, err := parsePluggedMemory(`<domain><devices><disk/></devices></domain>`); ok || err != nil {
		t.Fatalf("a domain without virtio-mem: ok %v, err %v", ok, err)
	}
	if _, _, err := parsePluggedMemory(`<domain><devices><memory model='virtio-mem'><target><size unit='parsecs'>1</size></target></memory></devices></domain>`); err == nil {
		t.Fatal("an unknown unit was accepted")
	}
}

func TestWithRequestedMemory(t *testing.T) {
	const live = `<domain type='qemu'><name>d</name><devices>
    <memory model='virtio-mem'>
      <target><size unit='KiB'>1048576</size><node>0</node><block unit='KiB'>2048</block><requested unit='KiB'>0</requested><current unit='KiB'>0</current></target>
      <alias name='virtiomem0'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>
    </memory></devices></domain>`
	dev, err := withRequestedMemory(live, 256)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<requested unit="MiB">256</requested>`, `<alias name="virtiomem0">`, `slot="0x05"`, `<size unit="KiB">1048576</size>`} {
		if !strings.Contains(dev, want) {
			t.Errorf("device XML lacks %s (libvirt finds the device by its address):\n%s", want, dev)
		}
	}
	if _, err := withRequestedMemory(`<domain><name>d</name><devices/></domain>`, 1); err == nil {
		t.Fatal("a domain without virtio-mem got a device")
	}
}

// TestParseGuestMemory: the balloon.* statistics in KiB, in bytes; none
// (ok false) before the guest's first report or when only the balloon's
// size is there (NOWAIT, a domain in a job), and figures that do not hold
// together are not believed.
func TestParseGuestMemory(t *testing.T) {
	p := func(kv ...any) []golibvirt.TypedParam {
		var out []golibvirt.TypedParam
		for i := 0; i < len(kv); i += 2 {
			out = append(out, golibvirt.TypedParam{Field: kv[i].(string), Value: golibvirt.TypedParamValue{D: 4, I: kv[i+1]}})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		params []golibvirt.TypedParam
		want   GuestMemory
		ok     bool
	}{
		{"reported", p("balloon.current", uint64(1<<20), "balloon.available", uint64(1280<<10), "balloon.usable", uint64(1100<<10),
			"balloon.unused", uint64(200<<10), "balloon.last-update", uint64(1796336002)),
			GuestMemory{TotalBytes: 1280 << 20, UsableBytes: 1100 << 20, UnusedBytes: 200 << 20}, true},
		{"size only", p("balloon.current", uint64(1<<20), "balloon.maximum", uint64(1<<20)), GuestMemory{}, false},
		{"never reported", p("balloon.available", uint64(1280<<10), "balloon.usable", uint64(1100<<10), "balloon.last-update", uint64(0)),
			GuestMemory{TotalBytes: 1280 << 20, UsableBytes: 1100 << 20}, false},
		{"usable above total", p("balloon.available", uint64(1<<10), "balloon.usable", uint64(2<<10), "balloon.last-update", uint64(1)),
			GuestMemory{TotalBytes: 1 << 20, UsableBytes: 2 << 20}, false},
	} {
		got, ok := parseGuestMemory(tc.params)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
		if ok && got.InUseBytes() != 180<<20 {
			t.Errorf("%s: in use %d, want %d", tc.name, got.InUseBytes(), 180<<20)
		}
	}
}

func TestParseIO(t *testing.T) {
	u := func(field string, v uint64) golibvirt.TypedParam {
		return golibvirt.TypedParam{Field: field, Value: golibvirt.TypedParamValue{D: 4, I: v}}
	}
	got := parseIO([]golibvirt.TypedParam{
		u("block.count", 2), u("block.0.rd.bytes", 100), u("block.0.wr.bytes", 10), u("block.1.rd.bytes", 1), u("block.1.wr.reqs", 7),
		u("net.count", 1), u("net.0.rx.bytes", 5), u("net.0.tx.bytes", 6), u("net.0.rx.pkts", 99),
		{Field: "block.0.name", Value: golibvirt.TypedParamValue{D: 7, I: "vda"}},
	})
	if want := (IO{BlockReadBytes: 101, BlockWriteBytes: 10, NetReceiveBytes: 5, NetSendBytes: 6}); got != want {
		t.Errorf("parseIO = %+v, want %+v", got, want)
	}
}
