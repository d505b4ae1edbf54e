// Package converter holds pure functions that turn CRI pod and container
// specs into what a runtime needs, one subpackage per runtime kind
// (converter/vm builds libvirt domains). Containers need no conversion:
// runtimes/containerd proxies CRI to containerd unchanged, which is what
// keeps crimux transparent for containers and critest results identical.
package converter
