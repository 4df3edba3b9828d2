SELECT min(at) - $2 FROM verify_starts WHERE pid = ANY($1) AND at > $2
