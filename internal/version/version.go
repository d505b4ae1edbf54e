// Package version holds crimux's name and version, set at link time with
// -ldflags "-X github.com/crimux/crimux/internal/version.Version=…".
package version

// Name is what Version reports as the runtime name.
const Name = "crimux"

// Version is the release; "dev" for builds without ldflags.
var Version = "0.1.0-dev"

// APIVersion is the CRI API version crimux serves.
const APIVersion = "v1"
