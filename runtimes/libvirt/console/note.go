package console

import (
	"bytes"
	"os"
	"strings"
)

// Note appends a line of crimux's own to VM id's CRI log (logPath), on
// stream stderr so that it is told from the guest's console (stdout):
// kubectl logs shows it in place. With a copier running, the copier
// writes it between two console lines it copies (never inside one); with
// none (the VM not started yet, or stopped), it is appended at once.
func (cs *Consoles) Note(id, logPath, text string) error {
	cs.mu.Lock()
	cp := cs.copiers[id]
	cs.mu.Unlock()
	if cp != nil {
		errc := make(chan error, 1)
		select {
		case cp.notes <- note{text: text, errc: errc}:
			return <-errc
		case <-cp.stopped:
		}
	}
	return appendNote(logPath, text)
}

type note struct {
	text string
	errc chan error
}

func appendNote(logPath, text string) error {
	if logPath == "" {
		return nil
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(noteLines(text))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// noteLines formats a note as CRI log lines, one per line of text.
func noteLines(text string) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		writeCRILineOn(&b, "stderr", []byte(line), "F")
	}
	return b.Bytes()
}

// writeNote writes a note through the copier's CRI log, after the
// complete console lines read so far.
func (cp *copier) writeNote(n note) {
	cp.copy(false)
	if cp.out == nil {
		if err := cp.openDst(); err != nil {
			n.errc <- err
			return
		}
	}
	_, err := cp.out.Write(noteLines(n.text))
	n.errc <- err
}
