package etcdstate

// Crash abandons s as a killed process would: its lease is no longer kept
// alive nor revoked, nothing is persisted, its connection is closed.
func Crash(s *Store) {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	if s.kaStop != nil {
		s.kaStop()
		<-s.kaDone
	}
	s.cli.Close()
}

// Txns is how many journal transactions s committed.
func Txns(s *Store) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txns
}
