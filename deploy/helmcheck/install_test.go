package helmcheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstallIntoCluster installs the chart with values-cpu.yaml into the
// cluster KUBECONFIG names, with Helm built from the module proxy (this module's
// tool), waits until every pod is ready (the frontend only is once a worker's
// model card is loaded and a router serves, which needs Consul, the router's
// view of the workers and the network policies to let all of it through), runs
// helm test, and uninstalls. TANDEM_HELM_IMAGE names the tandem image the
// cluster can pull (default tandem:local, e.g. kind load docker-image
// tandem:local after compose/build.sh).
//
// Skipped without KUBECONFIG: the project's machines have no cluster, so this
// test has not run there; everything else in this package runs without one.
func TestInstallIntoCluster(t *testing.T) {
	if os.Getenv("KUBECONFIG") == "" {
		t.Skip("KUBECONFIG is not set: no cluster to install the chart into")
	}
	image := os.Getenv("TANDEM_HELM_IMAGE")
	if image == "" {
		image = "tandem:local"
	}
	i := strings.LastIndex(image, ":")
	if i < 0 {
		t.Fatalf("TANDEM_HELM_IMAGE %q: want repository:tag", image)
	}
	helm := filepath.Join(t.TempDir(), "helm")
	if out, err := exec.Command("go", "build", "-o", helm, "helm.sh/helm/v4/cmd/helm").CombinedOutput(); err != nil {
		t.Fatalf("go build helm: %v\n%s", err, out)
	}
	ns := "tandem-helmcheck"
	release := fmt.Sprintf("helmcheck-%d", time.Now().Unix()%100000)
	run := func(timeout time.Duration, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, helm, append(args, "--namespace", ns)...)
		out, err := cmd.CombinedOutput()
		t.Logf("helm %s\n%s", strings.Join(args, " "), out)
		return err
	}
	err := run(12*time.Minute, "install", release, chartDir, "-f", filepath.Join(chartDir, "values-cpu.yaml"), "--create-namespace",
		"--set", "image.repository="+image[:i], "--set", "image.tag="+image[i+1:], "--wait", "--timeout", "10m")
	t.Cleanup(func() {
		if err := run(6*time.Minute, "uninstall", release, "--wait", "--timeout", "5m"); err != nil {
			t.Errorf("helm uninstall: %v (the namespace %s is left in place)", err, ns)
		}
	})
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if err := run(6*time.Minute, "test", release, "--timeout", "5m", "--logs"); err != nil {
		t.Fatalf("helm test: %v", err)
	}
}
