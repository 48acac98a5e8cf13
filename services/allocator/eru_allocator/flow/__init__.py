"""flow"""
