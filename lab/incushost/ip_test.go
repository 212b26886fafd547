package incushost

import "testing"

func TestAddressesStayInLoopbackBlocks(t *testing.T) {
	for n, want := range map[int]string{1: "127.0.1.1", 250: "127.0.1.250", 251: "127.0.2.1", 600: "127.0.3.100"} {
		if got := ipFor(n); got != want {
			t.Errorf("ipFor(%d) = %s, want %s", n, got, want)
		}
		s := &Server{nextIP: 1}
		s.useIP(want)
		if s.nextIP != n+1 {
			t.Errorf("after useIP(%s) the next is %d, want %d", want, s.nextIP, n+1)
		}
	}
}
