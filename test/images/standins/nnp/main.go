// Command nnp is the test bed's stand-in for the e2e "nonewprivs" image. It
// is installed setuid root; started as a non-root user it prints
// "Effective uid: 0" unless no_new_privs stopped the setuid bit from taking
// effect. It is built statically (CGO_ENABLED=0).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
