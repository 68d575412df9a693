package spoke

// SpawnerPID is the pid of m's spawner, or 0 when none runs.
func SpawnerPID(m *Manager) int {
	m.spawnerMu.Lock()
	defer m.spawnerMu.Unlock()
	if m.spawner == nil || !m.spawner.alive() {
		return 0
	}
	return m.spawner.pid
}
