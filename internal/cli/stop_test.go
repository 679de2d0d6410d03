package cli

import (
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/agent"
)

// TestStopBound: run has the time of its own clean stop (its parts, then the
// embedded containerd's) and no more than systemd's and the chart's 60 s;
// the other commands that write into containerd the time to clean up an
// import they gave up and stop the embedded containerd; every other command
// the short bound, whatever flags come first.
func TestStopBound(t *testing.T) {
	root := New("test", "")
	if runStopBound < agent.ShutdownTimeout+containerdStopTimeout || runStopBound >= 60*time.Second {
		t.Errorf("run's bound %s: want at least %s and under 60s", runStopBound, agent.ShutdownTimeout+containerdStopTimeout)
	}
	if writerStopBound < cleanupTimeout+containerdStopTimeout {
		t.Errorf("the writers' bound %s: want at least %s", writerStopBound, cleanupTimeout+containerdStopTimeout)
	}
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"run", "--images", "/srv/images"}, runStopBound},
		{[]string{"--data-dir", "/var/lib/holdfast", "run"}, runStopBound},
		{[]string{"sync"}, writerStopBound},
		{[]string{"import", "run"}, writerStopBound},
		{[]string{"release", "/srv/images/app.tar"}, writerStopBound},
		{[]string{"check", "-f", "-"}, stopBound},
		{[]string{"status", "-o", "json"}, stopBound},
		{[]string{"verify", "-"}, stopBound},
		{nil, stopBound},
	} {
		if got := StopBound(root, c.args); got != c.want {
			t.Errorf("StopBound(%q) = %s, want %s", c.args, got, c.want)
		}
	}
}
