// Command etcd is etcd's own server main, built from the etcd module for the cluster test.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
