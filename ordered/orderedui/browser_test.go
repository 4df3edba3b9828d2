package orderedui_test

func closeBrowser() error { return nil }
