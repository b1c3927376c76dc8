// Command etcd is the test cluster's etcd: the server module's own entry point, built at the
// release Kubernetes 1.37 is tested with (go.etcd.io/etcd/server/v3, see go.mod).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
