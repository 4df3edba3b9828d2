SELECT set_config('search_path', $1, false)
