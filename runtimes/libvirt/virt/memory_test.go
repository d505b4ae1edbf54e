package virt

import (
	"strings"
	"testing"
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
