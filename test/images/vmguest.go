package main

// KernelArgs of the test VM: a serial console, no kernel chatter, reboot at
// once on a panic (crimux sees the VM restart instead of a hung guest), and
// no_timer_check, as cloud images for VMs have (Fedora's, RHEL's): the
// kernel's check that the 8254 timer reaches it through the IO-APIC counts
// ticks over a busy-wait calibrated earlier in the boot, and on a host
// whose cores are shared (50 guests booting under TCG on 2 cores) the
// check failed ("MP-BIOS bug: 8254 timer not connected to IO-APIC") and
// the guest never got further: 48 of the bench's 50 burst guests, seen in
// their CRI logs. qemu's IO-APIC routes the timer; the check is not
// needed.
//
// The rest spares the guest work no test VM needs, an eighth of its boot
// under TCG (1.99 s of qemu CPU to the marker against 2.29 s, medians of 8
// boots each, through PVH): cryptomgr.notests skips the crypto API's
// self-tests of every algorithm the kernel registers, and
// initcall_blacklist two initcalls that only test or trace
// (crypto_kdf108_init runs the SP800-108 KDF's self-test, which
// cryptomgr.notests does not cover; init_kprobe_trace sets up kprobe
// events).
const vmKernelArgs = "console=ttyS0 quiet panic=-1 no_timer_check cryptomgr.notests " +
	"initcall_blacklist=crypto_kdf108_init,init_kprobe_trace"

// The modules /init loads, with their dependencies (from modules.dep): the
// cloud kernel builds virtio, the ACPI power button and evdev (which
// busybox acpid reads) and virtio-fs (with fuse) as modules. ext4 is built
// in.
var vmModules = []string{"virtio_pci", "virtio_blk", "virtio_net", "virtio_rng", "virtiofs", "button", "evdev"}

// vmInit is the test VM's /init. The e2e tests read these console lines:
// CRIMUX-VM-BOOTED once acpid runs (so the power button works from then
// on), CRIMUX-NET: <ip>/<prefix> once the pod network's IPv4 is up and
// CRIMUX-NET6: <ip> once its IPv6 is (and CRIMUX-DNS6: <servers> from
// DHCPv6) (after the marker), CRIMUX-DISK:
// <marker> once /dev/vda is mounted read-write at /mnt, CRIMUX-UPTIME:
// <seconds> every 2 s; then a shell on the console.
const vmInit = `#!/bin/sh
# /init of the crimux test VM (static busybox). Never exits: PID 1 exiting
# panics the kernel.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
exec </dev/console >/dev/console 2>&1

while read -r m; do
	insmod "/lib/modules/$m.ko" || echo "CRIMUX-WARN: insmod $m failed"
done </lib/modules/load-order
ip link set lo up 2>/dev/null

# The ACPI power button (button.ko, /dev/input/event*) powers off:
# /etc/acpid.conf maps PWRF to /etc/acpi/PWRF/00000080. A press before
# acpid has opened the event devices is lost, so wait (bounded) for that:
# CRIMUX-VM-BOOTED promises a working power button.
acpid -f -c /etc/acpi -a /etc/acpid.conf -l /var/log/acpid.log </dev/null >/dev/null 2>&1 &
acpid=$!
events=$(ls /dev/input 2>/dev/null | grep -c '^event')
i=0
while [ $i -lt 100 ]; do
	[ "$(ls -l "/proc/$acpid/fd" 2>/dev/null | grep -c '/dev/input/event')" -ge "$events" ] && break
	sleep 0.05
	i=$((i + 1))
done
[ $i -lt 100 ] || echo "CRIMUX-WARN: acpid did not open the input devices"
# After a newline: the firmware leaves its last console line unterminated.
printf '\nCRIMUX-VM-BOOTED\n'
# The guest agent, in the images that have one (vmagent.go).
[ -x /etc/crimux-guest-agent ] && /etc/crimux-guest-agent &

# The pod network (crimux gives the guest eth0 and serves it DHCP for
# IPv4, router advertisements and DHCPv6 for IPv6: the kernel takes the
# prefix and the router, crimux-dhcp6c the address), after the marker:
# the marker stands for the same boot with a NIC or without (the bench's
# direct path has none; DHCP, the address and httpd cost a guest under TCG
# several process starts). Once leased, CRIMUX-NET: <ip>/<prefix> (IPv4)
# and CRIMUX-NET6: <ip> (IPv6), each family on its own; with the first of
# them, an HTTP responder on :8080 (both families), and, when the kernel
# command line asks with crimux.probe=<ip:port>, an HTTP GET there until
# one answers: CRIMUX-PROBE-OK: <first line of markup> (or
# CRIMUX-PROBE-FAIL after 60 tries).
netup() {
	mkdir /run/netup 2>/dev/null || return 0
	httpd -p 8080 -h /www
	probe=$(sed -n 's/.*crimux\.probe=\([^ ]*\).*/\1/p' /proc/cmdline)
	if [ -n "$probe" ]; then
		i=0
		while [ $i -lt 60 ]; do
			# nc, not wget: the static busybox's wget looks the
			# port up through NSS and crashes.
			body=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "${probe%:*}" "${probe##*:}" 2>/dev/null)
			if [ -n "$body" ]; then
				echo "CRIMUX-PROBE-OK: $(echo "$body" | grep -m 1 '<')"
				break
			fi
			sleep 1
			i=$((i + 1))
		done
		[ $i -lt 60 ] || echo "CRIMUX-PROBE-FAIL: $probe"
	fi
}
if [ -e /sys/class/net/eth0 ]; then
	(
		ip link set eth0 up
		(crimux-dhcp6c eth0 2>/tmp/dhcp6c.log && netup) &
		if udhcpc -i eth0 -s /etc/udhcpc.script -f -q -n -t 30 -T 1 -A 1 >/tmp/udhcpc.log 2>&1; then
			echo "CRIMUX-NET: $(cat /run/net-address)"
			netup
		else
			wait # an IPv6-only pod has no lease: its DHCPv6 answer tells
			if [ ! -s /run/net6-address ]; then
				echo "CRIMUX-NET-ERROR: no DHCP lease"
				cat /tmp/udhcpc.log
			fi
		fi
	) &
fi

# A virtio disk: wait (bounded) for its node, mount it read-write.
hasdisk=
for d in /sys/bus/virtio/devices/*; do
	[ "$(cat "$d/device" 2>/dev/null)" = 0x0002 ] && hasdisk=1
done
if [ -n "$hasdisk" ]; then
	i=0
	while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
fi
if [ -b /dev/vda ]; then
	if mount -t ext4 -o rw /dev/vda /mnt; then
		echo "CRIMUX-DISK: $(cat /mnt/marker)"
	else
		echo "CRIMUX-DISK-ERROR: cannot mount /dev/vda"
	fi
fi

(
	while :; do
		read -r up rest </proc/uptime
		echo "CRIMUX-UPTIME: $up"
		sleep 2
	done
) &

# A shell on the console, with the console as its controlling tty; again
# whenever it exits.
while :; do
	setsid cttyhack sh
	sleep 1
done
`

const vmAcpidConf = "PWRF PWRF/00000080\n"

// vmUdhcpcScript configures eth0 from the lease (busybox udhcpc: $ip,
// $mask as a prefix length, $router, $dns, $mtu, $hostname).
const vmUdhcpcScript = `#!/bin/sh
case "$1" in
deconfig)
	ip -4 addr flush dev "$interface"
	;;
bound|renew)
	ip -4 addr flush dev "$interface"
	ip addr add "$ip/$mask" dev "$interface"
	[ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
	for r in $router; do ip route add default via "$r" dev "$interface"; break; done
	: >/etc/resolv.conf
	for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
	[ -n "$hostname" ] && hostname "$hostname"
	echo "$ip/$mask" >/run/net-address
	;;
esac
exit 0
`

// vmIndexHTML is what the VM's HTTP responder answers.
const vmIndexHTML = "CRIMUX-VM-HTTP\n"

const vmPowerOff = `#!/bin/sh
# ACPI power button: power off at once.
echo CRIMUX-POWEROFF >/dev/console
sync
poweroff -f
`
