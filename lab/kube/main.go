// Command kubelab runs a single-member embedded etcd and a real kube-apiserver
// (k8s.io/kubernetes/cmd/kube-apiserver/app) in one process, for local
// operator tests. It is test tooling only; nothing here is production code.
//
// Usage:
//
//	kubelab [kubelab flags] -- [kube-apiserver flags]
//
// If no --etcd-servers flag is among the kube-apiserver flags, kubelab adds
// --etcd-servers=http://127.0.0.1:<etcd-client-port>.
//
// Shutdown: SIGTERM/SIGINT is handled by the kube-apiserver command (a second
// signal exits immediately); once the apiserver has returned, etcd is closed.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	_ "time/tzdata" // as in cmd/kube-apiserver: CronJob timeZone support

	"go.etcd.io/etcd/server/v3/embed"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/version"  // as in cmd/kube-apiserver
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	ownArgs, apiArgs := splitArgs(argv)

	fs := flag.NewFlagSet("kubelab", flag.ContinueOnError)
	etcdDir := fs.String("etcd-data-dir", "", "etcd data directory (required)")
	clientPort := fs.Int("etcd-client-port", 22379, "etcd client port on 127.0.0.1")
	peerPort := fs.Int("etcd-peer-port", 22380, "etcd peer port on 127.0.0.1 (single member, never used by peers)")
	noFsync := fs.Bool("etcd-unsafe-no-fsync", false, "disable fsync in etcd (faster; data may be lost on crash)")
	etcdLogLevel := fs.String("etcd-log-level", "warn", "etcd log level (debug|info|warn|error)")
	etcdTimeout := fs.Duration("etcd-start-timeout", 60*time.Second, "how long to wait for etcd to become ready")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kubelab [kubelab flags] -- [kube-apiserver flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(ownArgs); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "kubelab: unexpected arguments %q (kube-apiserver flags go after --)\n", fs.Args())
		return 2
	}
	if *etcdDir == "" {
		fmt.Fprintln(os.Stderr, "kubelab: --etcd-data-dir is required")
		return 2
	}

	etcd, clientURL, err := startEtcd(*etcdDir, *clientPort, *peerPort, *noFsync, *etcdLogLevel, *etcdTimeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelab: etcd: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kubelab: etcd ready at %s (data dir %s)\n", clientURL, *etcdDir)

	// If etcd dies underneath the apiserver, there is no point in limping on.
	go func() {
		if err, ok := <-etcd.Err(); ok && err != nil {
			fmt.Fprintf(os.Stderr, "kubelab: etcd failed: %v\n", err)
			os.Exit(1)
		}
	}()

	if !hasFlag(apiArgs, "etcd-servers") {
		apiArgs = append(apiArgs, "--etcd-servers="+clientURL)
	}

	// NewAPIServerCommand installs the process signal handler
	// (genericapiserver.SetupSignalContext, which may only be called once).
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(apiArgs)
	code := cli.Run(cmd)

	fmt.Fprintf(os.Stderr, "kubelab: kube-apiserver exited with code %d; stopping etcd\n", code)
	etcd.Close()
	return code
}

// splitArgs splits argv at the first "--": before it are kubelab's flags,
// after it the kube-apiserver flags. Without "--", everything is kubelab's.
func splitArgs(argv []string) (own, api []string) {
	for i, a := range argv {
		if a == "--" {
			return argv[:i], argv[i+1:]
		}
	}
	return argv, nil
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

func startEtcd(dir string, clientPort, peerPort int, noFsync bool, logLevel string, timeout time.Duration) (*embed.Etcd, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	cfg := embed.NewConfig()
	cfg.Name = "kubelab"
	cfg.Dir = dir
	cfg.Logger = "zap"
	cfg.LogLevel = logLevel
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = noFsync
	// NewConfig leaves this at 0 (only etcd's CLI flag parsing sets the 300ms
	// default), which makes embedded etcd log every single request at warn level.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration

	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, "", fmt.Errorf("not ready after %s", timeout)
	}
}
