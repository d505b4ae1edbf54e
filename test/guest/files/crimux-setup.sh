# Runs once inside the guest's root (chroot) while test/guest/build.sh
# builds it; removed afterwards.
echo 'LABEL=debroot / ext4 defaults,errors=remount-ro 0 1' >/etc/fstab
# Nothing periodic: a test VM lives minutes, and under TCG every timer costs.
systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
	fstrim.timer e2scrub_reap.service >/dev/null 2>&1 || true
# Per-instance identity is made at first boot: cloud-init writes the SSH
# host keys, systemd the machine id.
rm -f /etc/ssh/ssh_host_*
: >/etc/machine-id
rm -f /var/lib/dbus/machine-id
passwd -l root
# Smaller: no package caches, lists, documentation or other locales.
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/*
find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'en*' ! -name locale.alias -exec rm -rf {} +
