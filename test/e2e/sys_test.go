package e2e

import "syscall"

var syscallZero = syscall.Signal(0)
