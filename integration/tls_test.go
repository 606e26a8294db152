package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/console"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// testPKI writes a CA and a certificate it signed for 127.0.0.1, returning the
// paths of ca.pem, cert.pem and key.pem.
func testPKI(t *testing.T) (caPath, certPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "tandem service"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", der), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// With --tls-cert/--tls-key/--tls-ca every service speaks TLS and the services
// authenticate each other; a caller without a certificate gets only health checks.
func TestMutualTLS(t *testing.T) {
	ca, cert, key := testPKI(t)
	tlsFlags := []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca}
	with := func(args ...string) []string { return append(args, tlsFlags...) }
	pre := startService(t, with("prefill", "--listen", "127.0.0.1:0", "--id", "prefill-t")...)
	dec := startService(t, with("decode", "--listen", "127.0.0.1:0", "--id", "decode-t", "--prefill-workers", pre, "--short-prefill-threshold", "16")...)
	rtr := startService(t, with("router", "--listen", "127.0.0.1:0", "--decode-workers", dec, "--prefill-workers", pre)...)
	fe := startService(t, with("frontend", "--listen", "127.0.0.1:0", "--router", rtr)...)

	// tandem health over TLS, with the CA and no client certificate.
	for _, a := range []string{pre, dec, rtr, fe} {
		deadline := time.Now().Add(time.Minute)
		for {
			out, err := exec.Command(tandemBin, "health", a, "--tls-ca", ca).CombinedOutput()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never healthy over TLS: %v %s", a, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The frontend serves HTTPS to clients without certificates.
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	body := `{"model":"tandem-tiny","max_tokens":4,"messages":[{"role":"user","content":"` + strings.Repeat("mutual TLS between every service ", 10) + `"}]}`
	resp, err := client.Post("https://"+fe+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Tandem struct {
			PrefillPath string `json:"prefill_path"`
		} `json:"tandem"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || out.Tandem.PrefillPath != "remote" {
		t.Fatalf("chat over HTTPS: %d, path %q; want 200 and remote (decode -> prefill over mTLS)", resp.StatusCode, out.Tandem.PrefillPath)
	}
	if resp, err := http.Post("http://"+fe+"/v1/chat/completions", "application/json", strings.NewReader(body)); err == nil && resp.StatusCode == 200 {
		t.Fatalf("plaintext HTTP to a TLS frontend succeeded")
	}

	// The console works over HTTPS, and the frontend's fleet stream from the
	// router over mutual TLS.
	page, err := client.Get("https://" + fe + "/")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != 200 || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Errorf("the console over HTTPS: %d %q", page.StatusCode, page.Header.Get("Content-Type"))
	}
	streaming := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	code, events := consoleEvents(t, streaming, "https://"+fe, "")
	if code != http.StatusOK {
		t.Fatalf("console events over HTTPS: %d", code)
	}
	nextEvent(t, events, "fleet", 20*time.Second, "both workers, from the router over mTLS", func(f console.Fleet) bool {
		return f.Connected && len(f.Workers) == 2 && f.Workers[0].ID == "decode-t" && f.Workers[1].ID == "prefill-t"
	})

	// A caller without a client certificate cannot use a worker.
	cc, err := grpc.NewClient(dec, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := workerv1.NewWorkerServiceClient(cc).Info(ctx, &workerv1.InfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Info without a client certificate: %v, want Unauthenticated", err)
	}

	// The operator's commands speak mTLS with the same flags.
	if out, err := exec.Command(tandemBin, append(append([]string{"route", "--router", rtr}, tlsFlags...), "hello")...).CombinedOutput(); err != nil {
		t.Errorf("tandem route over mTLS: %v\n%s", err, out)
	}
	for _, undo := range []string{"", "--undo"} {
		args := append([]string{"drain", dec}, tlsFlags...)
		if undo != "" {
			args = append(args, undo)
		}
		if out, err := exec.Command(tandemBin, args...).CombinedOutput(); err != nil {
			t.Errorf("tandem drain %s over mTLS: %v\n%s", undo, err, out)
		}
	}
	if out, err := exec.Command(tandemBin, "drain", dec, "--tls-ca", ca).CombinedOutput(); err == nil {
		t.Errorf("tandem drain without a client certificate succeeded: %s", out)
	}

	// The prefill worker's KV transfer port takes only callers with a certificate.
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	withCert, err := grpc.NewClient(pre, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer withCert.Close()
	info, err := workerv1.NewWorkerServiceClient(withCert).Info(ctx, &workerv1.InfoRequest{})
	if err != nil || info.GetInfo().GetKvTransferPort() == 0 {
		t.Fatalf("prefill worker Info: %v, %v; want a KV transfer port", info, err)
	}
	kvAddr := fmt.Sprintf("127.0.0.1:%d", info.GetInfo().GetKvTransferPort())
	for _, tc := range []struct {
		name  string
		creds *tls.Config
		ok    bool
	}{
		{"with a client certificate", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, true},
		{"without one", &tls.Config{RootCAs: pool}, false},
	} {
		kc, err := grpc.NewClient(kvAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc.creds)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = healthpb.NewHealthClient(kc).Check(ctx, &healthpb.HealthCheckRequest{})
		kc.Close()
		if (err == nil) != tc.ok {
			t.Errorf("health of the KV transfer port %s: %v", tc.name, err)
		}
	}
}
