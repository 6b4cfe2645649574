package controlplane

import (
	"bytes"
	"os"
	"testing"
	"time"
)

func readAll(t *testing.T, paths ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestEnsurePKIKeepsWhatExistsAndRenewsLeavesOfANewCA(t *testing.T) {
	f := NewFiles(t.TempDir())
	if err := EnsurePKI(f, time.Now()); err != nil {
		t.Fatal(err)
	}
	all := []string{f.CACert, f.CAKey, f.ServingCert, f.AdminCert, f.KubeletClientCert, f.KubeletCACert,
		f.FrontProxyCACert, f.FrontProxyClientCert, f.ServiceAccountKey, f.ServiceAccountPub}
	first := readAll(t, all...)

	if err := EnsurePKI(f, time.Now()); err != nil {
		t.Fatal(err)
	}
	for i, b := range readAll(t, all...) {
		if !bytes.Equal(b, first[i]) {
			t.Errorf("%s changed when the PKI was ensured again", all[i])
		}
	}

	if err := os.Remove(f.CAKey); err != nil {
		t.Fatal(err)
	}
	if err := EnsurePKI(f, time.Now()); err != nil {
		t.Fatal(err)
	}
	again := readAll(t, f.CACert, f.ServingCert, f.AdminCert)
	for i, p := range []string{f.CACert, f.ServingCert, f.AdminCert} {
		if bytes.Equal(again[i], first[i]) {
			t.Errorf("%s was kept although its CA was made anew", p)
		}
	}
}

func TestEnsurePKIWritesPrivateKeysForTheOwnerOnly(t *testing.T) {
	f := NewFiles(t.TempDir())
	if err := EnsurePKI(f, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.CAKey, f.ServingKey, f.AdminKey, f.ServiceAccountKey, f.KubeletCAKey} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", p, st.Mode().Perm())
		}
	}
}
