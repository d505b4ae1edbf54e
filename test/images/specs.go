package main

import (
	"github.com/crimux/crimux/test/images/oci"
)

// imageSpecs are the container images: busybox and the stand-ins of the
// e2e and critest images on the base layer, then critest's marker-file and
// USER images.
func imageSpecs(base oci.Layer, bins map[string][]byte) ([]oci.ImageSpec, error) {
	baseL := oci.SpecLayer{Layer: base, CreatedBy: "busybox (Debian, dynamic) + libc + /etc + pgrep/ipcs stand-ins"}
	shell := oci.ContainerConfig{Env: []string{defaultPath}, Cmd: []string{"sh"}}

	standins, err := buildStandinLayers(bins)
	if err != nil {
		return nil, err
	}
	specs := standinImageSpecs(baseL, shell, standins)
	markers, err := markerImageSpecs(baseL, shell)
	if err != nil {
		return nil, err
	}
	specs = append(specs, markers...)
	return append(specs, userImageSpecs(baseL)...), nil
}

// singleLayer builds a layer of the files fill adds.
func singleLayer(createdBy string, fill func(l *oci.LayerBuilder)) (oci.SpecLayer, error) {
	lb := oci.NewLayer()
	fill(lb)
	l, err := lb.Build()
	return oci.SpecLayer{Layer: l, CreatedBy: createdBy}, err
}

// standinLayers are the layers put on the base layer: the stand-in
// programs and the image with a group of its own.
type standinLayers struct {
	nginx, httpd, nnp, pause, group oci.SpecLayer
}

func buildStandinLayers(bins map[string][]byte) (standinLayers, error) {
	var s standinLayers
	var err error
	if s.nginx, err = singleLayer("nginx stand-in", func(l *oci.LayerBuilder) {
		l.File("usr/sbin/nginx", 0o755, bins["webserver"])
		l.File("usr/share/nginx/html/index.html", 0o644, []byte("<h1>Welcome to nginx!</h1>\n"))
	}); err != nil {
		return s, err
	}
	if s.httpd, err = singleLayer("httpd stand-in", func(l *oci.LayerBuilder) {
		l.File("usr/local/apache2/bin/httpd", 0o755, bins["webserver"])
		l.Dir("usr/local/apache2/logs", 0o755)
		l.File("usr/local/apache2/htdocs/index.html", 0o644, []byte("<html><body><h1>It works!</h1></body></html>\n"))
	}); err != nil {
		return s, err
	}
	if s.nnp, err = singleLayer("setuid nonewprivs stand-in", func(l *oci.LayerBuilder) {
		l.File("usr/local/bin/nnp", 0o4755, bins["nnp"])
	}); err != nil {
		return s, err
	}
	if s.pause, err = singleLayer("pause stand-in", func(l *oci.LayerBuilder) {
		l.File("pause", 0o755, bins["pause"])
	}); err != nil {
		return s, err
	}
	if s.group, err = singleLayer("adduser default-user (1000), group-defined-in-image (50000)", func(l *oci.LayerBuilder) {
		l.File("etc/passwd", 0o644, []byte(etcPasswd+"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n"))
		l.File("etc/group", 0o644, []byte(etcGroup+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n"))
		l.Dir("home/default-user", 0o755)
	}); err != nil {
		return s, err
	}
	return s, nil
}

// standinImageSpecs are busybox and the images of the stand-in programs.
func standinImageSpecs(baseL oci.SpecLayer, shell oci.ContainerConfig, l standinLayers) []oci.ImageSpec {
	nginxCfg := oci.ContainerConfig{
		Env:          []string{defaultPath},
		Cmd:          []string{"nginx", "-g", "daemon off;"},
		ExposedPorts: map[string]struct{}{"80/tcp": {}},
	}
	return []oci.ImageSpec{
		{ID: "e2e-busybox", Refs: []string{e2e + "busybox:1.29-2"}, Layers: []oci.SpecLayer{baseL}, Config: shell, MultiPlatform: true},
		{ID: "e2e-nginx", Refs: []string{e2e + "nginx:1.14-2"}, Layers: []oci.SpecLayer{baseL, l.nginx}, Config: nginxCfg, MultiPlatform: true},
		{ID: "e2e-httpd", Refs: []string{e2e + "httpd:2.4.39-4"}, Layers: []oci.SpecLayer{baseL, l.httpd}, MultiPlatform: true, Config: oci.ContainerConfig{
			Env:          []string{"PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:          []string{"/usr/local/apache2/bin/httpd", "-DFOREGROUND"},
			WorkingDir:   "/usr/local/apache2",
			ExposedPorts: map[string]struct{}{"80/tcp": {}},
		}},
		{ID: "e2e-nonewprivs", Refs: []string{e2e + "nonewprivs:1.3"}, Layers: []oci.SpecLayer{baseL, l.nnp}, MultiPlatform: true, Config: oci.ContainerConfig{
			Env:        []string{defaultPath},
			Entrypoint: []string{"/usr/local/bin/nnp"},
		}},
		{ID: "pause-3.9", Refs: []string{"pause:3.9"}, Layers: []oci.SpecLayer{l.pause}, MultiPlatform: true, Config: oci.ContainerConfig{
			User: "65535:65535", Env: []string{defaultPath}, Entrypoint: []string{"/pause"},
		}},
		{ID: "pause-3.10", Refs: []string{"pause:3.10", "pause:3.10.1", "pause:3.10.2"}, Layers: []oci.SpecLayer{l.pause}, MultiPlatform: true, Config: oci.ContainerConfig{
			User: "65535:65535", Env: []string{defaultPath}, Entrypoint: []string{"/pause"},
		}},
		// The host-network port-forward spec (streaming_linux.go) serves it on 12003.
		{ID: "hostnet-nginx", Refs: []string{criTools + "hostnet-nginx-amd64:latest"}, Layers: []oci.SpecLayer{baseL, l.nginx}, Config: oci.ContainerConfig{
			Env:          []string{defaultPath, "STANDIN_LISTEN=:12003"},
			Cmd:          []string{"nginx", "-g", "daemon off;"},
			ExposedPorts: map[string]struct{}{"12003/tcp": {}},
		}},
		{ID: "test-image-predefined-group", Refs: []string{criTools + "test-image-predefined-group:latest"},
			Layers: []oci.SpecLayer{baseL, l.group}, MultiPlatform: true,
			Config: oci.ContainerConfig{User: "1000", Env: []string{defaultPath}, Cmd: []string{"sh"}}},
		// docker.io/library/busybox, for developers' convenience.
		{ID: "library-busybox", Refs: []string{"library/busybox:latest", "library/busybox:1.37.0"}, Layers: []oci.SpecLayer{baseL}, Config: shell, MultiPlatform: true},
		// Our own e2e tests pull 127.0.0.1:5117/crimux/busybox:latest (a bare manifest, no index).
		{ID: "crimux-busybox", Refs: []string{"crimux/busybox:latest"}, Layers: []oci.SpecLayer{baseL}, Config: shell},
	}
}

// markerImageSpecs are the test images built upstream by `ADD $TEST $TEST`
// on busybox: one marker file each.
func markerImageSpecs(baseL oci.SpecLayer, shell oci.ContainerConfig) ([]oci.ImageSpec, error) {
	var specs []oci.ImageSpec
	for _, m := range []struct {
		id, file string
		refs     []string
	}{
		{"test-image-1", "test-image-1", []string{"test-image-1:latest"}},
		{"test-image-2", "test-image-2", []string{"test-image-2:latest"}},
		{"test-image-3", "test-image-3", []string{"test-image-3:latest"}},
		{"test-image-latest", "test-image-latest", []string{"test-image-latest:latest"}},
		{"test-image-digest", "test-image-digest", []string{"test-image-digest:latest"}},
		{"test-image-tags", "same-image", []string{"test-image-tags:1", "test-image-tags:2", "test-image-tags:3"}},
		{"test-image-tag-test", "test", []string{"test-image-tag:test"}},
		{"test-image-tag-all", "all", []string{"test-image-tag:all"}},
	} {
		l, err := singleLayer("ADD "+m.file, func(l *oci.LayerBuilder) { l.File(m.file, 0o644, nil) })
		if err != nil {
			return nil, err
		}
		var refs []string
		for _, r := range m.refs {
			refs = append(refs, criTools+r)
		}
		specs = append(specs, oci.ImageSpec{ID: m.id, Refs: refs, Layers: []oci.SpecLayer{baseL, l}, Config: shell, MultiPlatform: true})
	}
	return specs, nil
}

// userImageSpecs are the test images built upstream by `USER $USER` on
// busybox.
func userImageSpecs(baseL oci.SpecLayer) []oci.ImageSpec {
	var specs []oci.ImageSpec
	for _, u := range []struct{ name, user string }{
		{"test-image-user-uid", "1002"},
		{"test-image-user-username", "www-data"},
		{"test-image-user-uid-group", "1003:1004"},
		{"test-image-user-username-group", "www-data:1004"},
	} {
		specs = append(specs, oci.ImageSpec{
			ID: u.name, Refs: []string{criTools + u.name + ":latest"}, Layers: []oci.SpecLayer{baseL}, MultiPlatform: true,
			Config: oci.ContainerConfig{User: u.user, Env: []string{defaultPath}, Cmd: []string{"sh"}},
		})
	}
	return specs
}

const etcPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const etcGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
`

// pgrep and ipcs are not in Debian's busybox; critest calls
// `sh -c "pgrep sleep || true"` and `ipcs -m`.
const pgrepScript = `#!/bin/sh
# crimux test bed stand-in for pgrep(1): prints the pids of processes whose
# name (/proc/PID/comm) matches the extended regular expression $1.
[ $# -ge 1 ] || { echo "usage: pgrep PATTERN" >&2; exit 2; }
status=1
for d in /proc/[0-9]*; do
	pid=${d#/proc/}
	[ "$pid" = "$$" ] && continue
	read -r comm < "$d/comm" 2>/dev/null || continue
	if echo "$comm" | grep -qE -- "$1"; then
		echo "$pid"
		status=0
	fi
done
exit $status
`

const ipcsScript = `#!/bin/sh
# crimux test bed stand-in for ipcs(1): lists the System V shared memory
# segments of the caller's IPC namespace (from /proc/sysvipc/shm).
case "${1:--m}" in
-m|-a) ;;
*) echo "ipcs (stand-in): only -m is supported" >&2; exit 1 ;;
esac
echo
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch     status"
[ -r /proc/sysvipc/shm ] || exit 0
tail -n +2 /proc/sysvipc/shm | while read -r key shmid perms size cpid lpid nattch uid rest; do
	printf '%-10s %-10s %-10s %-10s %-10s %-10s\n' "$key" "$shmid" "$uid" "$perms" "$size" "$nattch"
done
echo
`
