// Command coredns is CoreDNS with the plugins the cluster test's DNS uses: cluster names answered from the
// API (kubernetes), on the node's address (bind), with errors and queries logged. Pods find Services by name
// through it, as in any cluster (spegel's DNS bootstrap in the chart's peers needs that).
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
