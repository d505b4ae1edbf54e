# Runs once inside the node's root (chroot) while test/node/build.sh makes
# the disk, after crimux's `make install`; removed afterwards. What an
# operator does on a cgroup v2 / systemd node, less what build.sh copies in.
set -eu
echo 'LABEL=crimuxnode / ext4 defaults,errors=remount-ro 0 1' >/etc/fstab
echo crimux-node >/etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 crimux-node\n' >/etc/hosts
# Nothing periodic: the node lives minutes under TCG, where timers cost.
systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
	fstrim.timer e2scrub_reap.service man-db.timer >/dev/null 2>&1 || true
# libvirt must not manage qemu's cgroups: crimux places qemu in the pod's
# cgroup itself (docs/vm-pods.md, "Cgroups").
echo "# crimux: libvirt must not manage qemu's cgroups" >>/etc/libvirt/qemu.conf
echo 'cgroup_controllers = [ ]' >>/etc/libvirt/qemu.conf
# qemu writes its console log itself: through virtlogd, a virtlogd restart
# loses every VM's console (docs/node.md, "Consoles and virtlogd").
echo 'stdio_handler = "file"' >>/etc/libvirt/qemu.conf
systemctl enable systemd-networkd.service ssh.service containerd.service \
	crimux-test-registry.service libvirtd.service virtlogd.service crimux.service
# A fresh identity per boot of the image: systemd makes the machine id.
: >/etc/machine-id
rm -f /var/lib/dbus/machine-id
passwd -l root >/dev/null
