package secret

// Held is how many bytes w holds back, not passed on yet.
func Held(w *Writer) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf)
}
