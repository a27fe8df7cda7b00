package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/auth"
)

// ReadKeyFile reads a group key file (auth.ParseKeys' format); an empty
// path is no keys. It returns the keys and the path.
func ReadKeyFile(path string) ([]engine.Key, string, error) {
	if path == "" {
		return nil, "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	keys, err := auth.ParseKeys(f)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return keys, path, nil
}

// WriteKeyFile generates a group key (id 1, 32 random bytes) and writes it
// to dir/keys, readable by its owner only, for member processes
// (-key-file). It returns the keys and the path.
func WriteKeyFile(dir string) ([]engine.Key, string, error) {
	k, err := auth.GenerateKey(1)
	if err != nil {
		return nil, "", err
	}
	keys := []engine.Key{k}
	path := filepath.Join(dir, "keys")
	return keys, path, writeKeys(path, keys)
}

// writeKeys writes keys to a new file at path, readable by its owner only.
func writeKeys(path string, keys []engine.Key) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := auth.WriteKeys(f, keys); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// appendAuthArgs adds the authentication flags of a member process.
func appendAuthArgs(a []string, keyFile string, encrypt, insecure bool) []string {
	if keyFile != "" {
		a = append(a, "-key-file", keyFile)
	}
	if encrypt {
		a = append(a, "-encrypt")
	}
	if insecure {
		a = append(a, "-insecure")
	}
	return a
}
