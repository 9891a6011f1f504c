// Package mtls makes the host's one-time certificate for mTLS with a
// provider plugin (plugin.Options.MTLS), as go-plugin's AutoMTLS does. It
// is a package of its own so that hosts that do not use it, the Lambdas,
// do not link certificate generation.
package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"time"

	"github.com/sandstep/sandstep/providers/plugin"
)

// OneTime makes a self-signed ECDSA P-521 certificate for "localhost",
// valid for a day, as go-plugin's client does for AutoMTLS. Give it as
// plugin.Options{MTLS: mtls.OneTime}: each start of the plugin gets a new
// one.
func OneTime() (plugin.ClientCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		return plugin.ClientCert{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return plugin.ClientCert{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"HashiCorp"}},
		DNSNames:              []string{"localhost"},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageKeyAgreement | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		NotBefore:             now.Add(-30 * time.Second),
		NotAfter:              now.Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return plugin.ClientCert{}, err
	}
	return plugin.ClientCert{
		PEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}, nil
}
