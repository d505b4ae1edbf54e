package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crimux/crimux/kubeapi"
)

// snapshotVerbs are snapshot's sub-verbs. Without one, "snapshot POD
// NAME" creates, as it always did; a pod named like a sub-verb is
// snapshotted with "snapshot create POD NAME".
var snapshotVerbs = []string{"create", "list", "delete"}

// snapshotCommand runs kubectl crimux snapshot [create|list|delete].
func snapshotCommand(in invocation, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return snapshotList(in, args[1:])
		case "delete":
			return requestCommand(in.ctx, in.o, "snapshot delete", args[1:], in.stdout, in.client)
		case "create":
			args = args[1:]
		}
	}
	if len(args) != 2 {
		return fmt.Errorf("snapshot takes a pod and a snapshot name, got %d arguments: "+
			"kubectl crimux snapshot [create] POD NAME, snapshot list POD or snapshot delete POD NAME", len(args))
	}
	return requestCommand(in.ctx, in.o, "snapshot", args, in.stdout, in.client)
}

// deleteRequest sets crimux.io/snapshot-delete-request to name; its
// answer reads "snapshot NAME deleted".
func deleteRequest(name string) request {
	r := resultRequest("snapshot delete", kubeapi.AnnotationSnapshotDeleteRequest, name, kubeapi.AnnotationSnapshotDeleteResult)
	answer := r.answer
	r.answer = func(a map[string]string) (string, bool, bool) {
		outcome, failed, done := answer(a)
		if done && !failed {
			outcome = "snapshot " + name + " " + outcome
		}
		return outcome, failed, done
	}
	return r
}

// snapshotList prints the snapshots the pod's node agent lists in
// crimux.io/snapshots (kubeapi/snapshots.go): a read of the pod, no
// request.
func snapshotList(in invocation, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("snapshot list takes one pod, got %d arguments: kubectl crimux snapshot list POD", len(args))
	}
	c, ns, err := in.client(in.o)
	if err != nil {
		return err
	}
	timeout := in.o.timeout
	if !in.o.timeoutSet {
		timeout = defaultRequestTimeout
	}
	ctx, cancel := context.WithTimeout(in.ctx, timeout)
	defer cancel()
	pod, err := c.kube.CoreV1().Pods(ns).Get(ctx, args[0], metav1.GetOptions{})
	if err != nil {
		return err
	}
	var entries []kubeapi.SnapshotEntry
	ok, err := kubeapi.DecodeAnnotation(pod.Annotations, kubeapi.AnnotationSnapshots, &entries)
	switch {
	case err != nil:
		return fmt.Errorf("pod %s/%s: %w", ns, pod.Name, err)
	case !ok:
		return fmt.Errorf("pod %s/%s has no %s: its node agent lists a VM pod's snapshots once the pod carries a crimux.io request "+
			"(kubectl crimux start, snapshot...), and after each snapshot, restore or delete", ns, pod.Name, kubeapi.AnnotationSnapshots)
	case len(entries) == 0:
		_, err := fmt.Fprintf(in.stderr, "No snapshots of pod %s/%s.\n", ns, pod.Name)
		return err
	}
	return printSnapshots(in.stdout, entries)
}

// printSnapshots writes entries as a table, as kubectl get does.
func printSnapshots(w io.Writer, entries []kubeapi.SnapshotEntry) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tDESCRIPTION")
	for _, e := range entries {
		created, description := e.Created, e.Description
		if created == "" {
			created = "<unknown>"
		}
		if description == "" {
			description = "<none>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printable(e.Name), printable(created), printable(description))
	}
	return tw.Flush()
}

// printable is an annotation's text made safe for a terminal and a
// table: anyone who may patch the pod may have written it, so control
// characters (escape sequences, tabs, newlines) become spaces.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
