package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"sync"
	"time"
)

// CA is the certificate authority of one sandbox. The proxy presents
// certificates it signs to the sandbox's clients when it terminates TLS to
// a host a secret is scoped to; only that sandbox trusts it, and its key
// never enters the sandbox.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte

	// leafKey signs for every host: one key per sandbox is as good as one
	// per host, and costs one generation instead of many.
	leafOnce sync.Once
	leafKey  *ecdsa.PrivateKey
	leafErr  error
	mu       sync.Mutex
	leaves   map[string]*tls.Certificate
}

// NewCA makes a CA valid until notAfter (plus a day, for clocks that
// drift), named after the sandbox.
func NewCA(name string, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sandstep sandbox " + name, Organization: []string{"sandstep"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// ParseCA loads a CA saved with CertPEM and KeyPEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("egress: CA: not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA certificate, for the sandbox's trust store.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// KeyPEM is the CA's private key; keep it where no sandbox can read it.
func (ca *CA) KeyPEM() []byte { return ca.keyPEM }

// leaf returns a certificate for host (a name or an address).
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.leafOnce.Do(func() { ca.leafKey, ca.leafErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader) })
	if ca.leafErr != nil {
		return nil, ca.leafErr
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok {
		return c, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: ca.leafKey}
	ca.leaves[host] = c
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

// SystemBundles are where distributions keep the system's CA bundle; the
// first that exists is the one a sandbox's combined bundle replaces.
var SystemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
	"/etc/ssl/cert.pem",                  // Alpine, macOS
}

// SystemBundle returns the path and content of the first system CA bundle
// found ("" and nil when there is none).
func SystemBundle() (string, []byte) {
	for _, p := range SystemBundles {
		if b, err := os.ReadFile(p); err == nil {
			return p, b
		}
	}
	return "", nil
}

// RootPool returns the system's roots plus the certificates in the given
// PEM files: what the proxy verifies upstream servers against.
func RootPool(files []string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("upstream CA file: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("upstream CA file %s: no PEM certificate in it", f)
		}
	}
	return pool, nil
}
