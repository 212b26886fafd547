package helm

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A succeeded pod's termination messages give the step its facts: only
// NAME=NUMBER lines (a word, a secret, an exponent or a name in capitals
// stays out), at most maxFacts of them, from each of its containers.
func TestMessageFacts(t *testing.T) {
	var many strings.Builder
	for i := range 40 {
		fmt.Fprintf(&many, "n%d=%d\n", i, i)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rate-x", Namespace: "media"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "copy", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "wrote the sample\ncopied_bytes=268435456\n  seconds=1.25  \npassword=hunter2\nsize=1e9\nRate=3\ntoken=123abc\n"}}},
		{Name: "idle", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "more", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "files=300"}}},
	}}}
	cl := &cluster{client: fake.NewSimpleClientset(pod)}
	got := messageFacts(context.Background(), cl, "media", "rate-x")
	want := map[string]string{"copied_bytes": "268435456", "seconds": "1.25", "files": "300"}
	if !maps.Equal(got, want) {
		t.Errorf("facts = %v, want %v", got, want)
	}
	pod.Status.ContainerStatuses[0].State.Terminated.Message = many.String()
	cl = &cluster{client: fake.NewSimpleClientset(pod)}
	if got := messageFacts(context.Background(), cl, "media", "rate-x"); len(got) != maxFacts {
		t.Errorf("%d facts from 41 lines, want %d", len(got), maxFacts)
	}
	if got := messageFacts(context.Background(), cl, "media", ""); got != nil {
		t.Errorf("facts of no pod: %v", got)
	}
}
