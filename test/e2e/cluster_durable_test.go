package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// The durable VM's cluster objects: a StorageClass of static local
// volumes, one PersistentVolume of block mode on a loop device (the bed's
// storage: no provisioner, no mock), a StatefulSet whose one replica
// boots the Debian guest from its claim.
const durableStorage = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: crimux-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: crimux-durable-pv}
spec:
  capacity: {storage: 4Gi}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: crimux-local
  local: {path: %q}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [%q]}
`

const durableStatefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: durable, namespace: ` + clusterNamespace + `}
spec:
  serviceName: durable
  replicas: 1
  selector: {matchLabels: {app: durable-vm}}
  template:
    metadata:
      labels: {app: durable-vm}
      annotations: {crimux.io/root-disk: /dev/xvda}
    spec:
      runtimeClassName: vm
      terminationGracePeriodSeconds: 120
      nodeSelector: {kubernetes.io/hostname: %q}
      containers:
      - name: vm
        image: ` + debianImage + `
        imagePullPolicy: IfNotPresent
        resources:
          limits: {cpu: "1", memory: 1Gi}
        volumeDevices: [{name: root, devicePath: /dev/xvda}]
  volumeClaimTemplates:
  - metadata: {name: root}
    spec:
      storageClassName: crimux-local
      volumeMode: Block
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 4Gi}}
`

// TestClusterDurableVM (make e2e-cluster): a StatefulSet VM on a
// block claim (a static local PV on a loop device): the first pod imports
// the image into the volume; a file the guest writes survives kubectl
// delete pod (the pod comes back on the same disk, not imported again)
// and kubectl drain + uncordon, whose shutdown is clean: the guest's
// journal of the drained boot ends with systemd's power-off, not a cut.
// kube-controller-manager (StatefulSet, PV binding, garbage collection)
// and kube-scheduler run for this test alone.
func TestClusterDurableVM(t *testing.T) {
	k8s := k8sDir(t)
	requireVM(t)
	startClusterNode(t, k8s, "", debianImage)
	startControllers(t, k8s)
	host := kubectl(t, k8s, "get", "node", kubeletNode, "-o", `jsonpath={.metadata.labels.kubernetes\.io/hostname}`)
	dev := loopDevice(t, 4<<30)
	t.Cleanup(func() { deleteDurable(k8s) })
	kubectlApply(t, k8s, fmt.Sprintf(durableStorage, dev, host))
	kubectlApply(t, k8s, fmt.Sprintf(durableStatefulSet, host))

	first := waitDurablePod(t, k8s, "")
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", "durable-0"); !strings.Contains(logs, "crimux: importing the image's disk") ||
		!strings.Contains(logs, "crimux: imported") {
		t.Fatalf("kubectl logs durable-0 does not tell the import:\n%s", tail(logs, 20))
	}
	token := "durable-" + randomToken()
	kubectl(t, k8s, "-n", clusterNamespace, "exec", "durable-0", "--", "sh", "-c", "echo "+token+" >/root/kept && sync")

	kubectl(t, k8s, "-n", clusterNamespace, "delete", "pod", "durable-0", "--timeout", "5m")
	second := waitDurablePod(t, k8s, first)
	requireKept(t, k8s, token)
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", "durable-0"); strings.Contains(logs, "importing") ||
		!strings.Contains(logs, "booting it as it is") {
		t.Fatalf("kubectl logs of the recreated durable-0, want no import:\n%s", tail(logs, 20))
	}

	start := time.Now()
	kubectl(t, k8s, "drain", kubeletNode, "--pod-selector", "app=durable-vm", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout", "5m")
	drained := time.Since(start)
	t.Logf("kubectl drain took %s", drained.Round(100*time.Millisecond))
	if drained > 120*time.Second {
		t.Fatalf("drain took %s, more than the pod's terminationGracePeriodSeconds (120)", drained)
	}
	kubectl(t, k8s, "uncordon", kubeletNode)
	waitDurablePod(t, k8s, second)
	requireKept(t, k8s, token)
	journal := kubectl(t, k8s, "-n", clusterNamespace, "exec", "durable-0", "--", "sh", "-c", "journalctl -b -1 -o cat --no-pager | tail -n 40")
	if !strings.Contains(journal, "System Power Off") && !strings.Contains(journal, "poweroff.target") {
		t.Fatalf("the drained boot's journal does not end with a power-off:\n%s", journal)
	}
	t.Logf("the drained boot's journal ends:\n%s", tail(journal, 6))
}

// waitDurablePod waits until durable-0, another pod than the one of UID
// old, runs and its guest agent answers; it returns the pod's UID.
func waitDurablePod(t *testing.T, k8s, old string) string {
	t.Helper()
	var uid string
	testutil.Eventually(t, 10*time.Minute, "durable-0 Running (a new pod)", func() error {
		p, err := getPod(k8s, "durable-0")
		if err != nil {
			return err
		}
		if p.Metadata.UID == old {
			return fmt.Errorf("still the pod %s", old)
		}
		if _, _, err := p.runningID(); err != nil {
			return err
		}
		uid = p.Metadata.UID
		return nil
	})
	testutil.Eventually(t, guestBootTimeout, "kubectl exec reaching durable-0's guest agent", func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", "durable-0", "--", "true")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	return uid
}

func requireKept(t *testing.T, k8s, token string) {
	t.Helper()
	if got := kubectl(t, k8s, "-n", clusterNamespace, "exec", "durable-0", "--", "cat", "/root/kept"); got != token {
		t.Fatalf("durable-0's guest reads %q from /root/kept, want %q", got, token)
	}
}

// deleteDurable removes the test's StatefulSet, claim, volume and class.
func deleteDurable(k8s string) {
	for _, args := range [][]string{
		{"-n", clusterNamespace, "delete", "statefulset", "durable", "--ignore-not-found", "--timeout", "5m"},
		{"-n", clusterNamespace, "delete", "pod", "durable-0", "--ignore-not-found", "--timeout", "5m"},
		{"-n", clusterNamespace, "delete", "pvc", "root-durable-0", "--ignore-not-found", "--timeout", "2m"},
		{"delete", "pv", "crimux-durable-pv", "--ignore-not-found", "--timeout", "2m"},
		{"delete", "storageclass", "crimux-local", "--ignore-not-found"},
		{"uncordon", kubeletNode},
	} {
		_, _ = kubectlErr(k8s, args...)
	}
}

// startControllers runs kube-controller-manager (the controllers a
// StatefulSet on a claim needs: statefulset, PV binding, protection of
// claims in use, garbage collection, and node lifecycle, which lifts the
// not-ready taint kubelet registers with) and kube-scheduler against the bed's
// API server as its admin (the bed's PKI has no identities of their own),
// until the test ends.
func startControllers(t *testing.T, k8s string) {
	t.Helper()
	admin := filepath.Join(clusterPKI, "admin.kubeconfig")
	startKubeProcs(t, k8s, controllerManager(volumeControllers+",statefulset-controller,node-lifecycle-controller,garbage-collector-controller"),
		[]string{"kube-scheduler", "--kubeconfig", admin, "--secure-port", "0", "--leader-elect=false"})
}

// volumeControllers bind claims to volumes and protect those in use.
const volumeControllers = "persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller"

// controllerManager is kube-controller-manager's command line running
// controllers (a comma-separated list) as the bed's admin.
func controllerManager(controllers string) []string {
	return []string{"kube-controller-manager", "--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"), "--secure-port", "0", "--leader-elect=false",
		"--controllers", controllers,
		"--service-account-private-key-file", filepath.Join(clusterPKI, "sa.key"), "--root-ca-file", filepath.Join(clusterPKI, "ca.crt")}
}

// startKubeProcs runs each command line (a binary of k8s and its flags)
// until the test ends; their logs are printed if it failed.
func startKubeProcs(t *testing.T, k8s string, procs ...[]string) {
	t.Helper()
	for _, args := range procs {
		log, err := os.CreateTemp("", args[0]+"-*.log")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(k8s, args[0]), args[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", args[0], err)
		}
		name := args[0]
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(log.Name())
				t.Logf("%s log, last lines:\n%s", name, tail(string(b), 30))
			}
			log.Close()
			os.Remove(log.Name())
		})
	}
}
