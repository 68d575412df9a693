package spoke

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// ScratchDir returns the private scratch directory of k's spoke under root:
// root/<hash of the user>/<app>. It creates root and the user's directory,
// both 0711: a spoke's unprivileged uid must pass through them but may not
// list them. The leaf is made by sandbox.Prepare, 0700 and the spoke's own;
// Landlock confines each spoke to its leaf.
func ScratchDir(root string, k Key) (string, error) {
	sum := sha256.Sum256([]byte(k.User))
	userDir := filepath.Join(root, hex.EncodeToString(sum[:12]))
	for _, d := range []string{root, userDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", fmt.Errorf("failed to create scratch directory: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return "", fmt.Errorf("failed to set scratch directory mode: %w", err)
		}
	}
	return filepath.Join(userDir, k.appLabel()), nil
}
