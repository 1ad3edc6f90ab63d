"""acquire: torrent → qBittorrent → library, as a durable workflow on durably."""
